#!/usr/bin/env python3
"""Benchmark: `kata-mem serve`, side by side in one run.

1. plan-only request latency, p50 and p99 over sequential requests on one kept-alive
   connection (as a Go shim's net/http keeps it), against the floor, a trivial aiohttp
   server on the same kind of unix socket that answers a fixed JSON document and does
   no work, and against the one-shot `kata-mem shim` (a process per request);
2. throughput, plan only, with 50 concurrent clients over 50 sandboxes;
3. the service's resident memory (VmRSS) when started, after 100 distinct sandboxes
   were planned, and with 100 sandboxes in its state directory (applied to a fake QEMU
   monitor; its reconcile loop visits them).

Everything runs from this checkout with the running interpreter (`python -m kata_mem`);
client and server share the machine's CPUs.

    .venv/bin/python scripts/bench_service.py [--requests 1000] [--shim-runs 30]
        [--latency-only]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.fake_qmp import FakeQemu, FakeQmpServer  # noqa: E402

CONFIG = ROOT / "tests" / "fixtures" / "kata-configs" / "configuration-qemu.toml"
FLOOR = """
import sys
from aiohttp import web
body = open(sys.argv[2], "rb").read()
async def shim(request):
    await request.read()
    return web.Response(body=body, content_type="application/json")
async def healthz(request):
    return web.Response(text="{}")
app = web.Application()
app.router.add_post("/v1/shim", shim)
app.router.add_get("/healthz", healthz)
web.run_app(app, path=sys.argv[1], print=None, access_log=None)
"""


def request(sandbox: str = "bench", **fields: Any) -> bytes:
    doc = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": sandbox,
        "event": "update",
        "config": str(CONFIG),
        "containers": [
            {
                "id": "c1",
                "state": "running",
                "memory_limit_bytes": 256 << 20,
                "cpu_quota": 50000,
                "cpu_period": 100000,
            }
        ],
        "backend": None,
        "apply": False,
        "host": {"memory_bytes": 32 << 30, "cpus": 8},
        **fields,
    }
    return json.dumps(doc).encode()


class Unix(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=60)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def post(conn: Unix, body: bytes, tries: int = 1) -> bytes:
    for _ in range(tries):
        conn.request("POST", "/v1/shim", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status == 200:
            return data
    raise SystemExit(f"HTTP {resp.status}: {data[:300]!r}")


def wait_ready(path: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(400):
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode}")
        try:
            conn = Unix(path)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                conn.close()
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{path}: not ready")


def latencies(path: str, body: bytes, n: int) -> list[float]:
    conn = Unix(path)
    for _ in range(50):  # warm up: imports, caches, the connection
        post(conn, body)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        post(conn, body)
        out.append(time.perf_counter() - t0)
    conn.close()
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def shim_runs(runs: int, body: bytes) -> list[float]:
    out = []
    for _ in range(runs + 2):
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "kata_mem", "shim"],
            input=body,
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        out.append(time.perf_counter() - t0)
    return out[2:]


async def throughput(path: str, clients: int, seconds: float) -> tuple[int, float]:
    import aiohttp

    bodies = [request(f"bench-{i}") for i in range(clients)]
    done = 0
    stop = time.perf_counter() + seconds

    async def client(i: int, session: aiohttp.ClientSession) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            async with session.post("http://localhost/v1/shim", data=bodies[i]) as resp:
                await resp.read()
                assert resp.status == 200
                done += 1

    connector = aiohttp.UnixConnector(path=path, limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(i, session) for i in range(clients)))
        return done, time.perf_counter() - t0


def vm_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise SystemExit("no VmRSS")


def cpu_s(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def latency_table(served: list[float], trivial: list[float], cpu: float, floor_cpu: float) -> float:
    """Print part 1 (the service against the floor); the service's p50 in ms."""
    ms = 1000.0
    p50, p99 = pct(served, 50) * ms, pct(served, 99) * ms
    f50, f99 = pct(trivial, 50) * ms, pct(trivial, 99) * ms
    load = os.getloadavg()[0]
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {load:.2f}; "
        f"{len(served)} sequential requests on one connection (each server)\n"
    )
    c, fc = cpu * ms, floor_cpu * ms
    print("| plan-only request | p50 | p99 | server CPU a request | p50 vs the service |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| `POST /v1/shim` to `kata-mem serve` | {p50:.2f} ms | {p99:.2f} ms | {c:.2f} ms | 1 |")
    print(
        f"| floor: aiohttp on a unix socket, fixed answer | {f50:.2f} ms | {f99:.2f} ms | "
        f"{fc:.2f} ms | {f50 / p50:.2f} (service = {p50 / f50:.2f}x the floor; CPU "
        f"{c / fc:.2f}x) |"
    )
    return p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--shim-runs", type=int, default=30)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="only the plan-only latency and CPU against the floor (part 1)",
    )
    args = parser.parse_args()
    body = request()
    env = {k: v for k, v in os.environ.items() if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG")}
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-") as tmp:
        sock, floor_sock = f"{tmp}/kata-mem.sock", f"{tmp}/floor.sock"
        state = f"{tmp}/state"
        service = subprocess.Popen(
            [sys.executable, "-m", "kata_mem", "serve", "--socket", sock, "--state-dir", state],
            cwd=ROOT,
            env=env,
            stderr=subprocess.DEVNULL,
        )
        answer = Path(tmp) / "answer.json"
        floor = None
        try:
            wait_ready(sock, service)
            rss_start = vm_rss_kib(service.pid)
            conn = Unix(sock)
            answer.write_bytes(post(conn, body))
            conn.close()
            floor = subprocess.Popen(
                [sys.executable, "-c", FLOOR, floor_sock, str(answer)], env=env
            )
            wait_ready(floor_sock, floor)
            # Interleaved blocks, so that drift of the machine hits both alike.
            # The servers' CPU time per request too: on a shared machine, the latency of the
            # busier process suffers more from the other tenants' load than the floor's.
            served: list[float] = []
            trivial: list[float] = []
            cpu = {service.pid: 0.0, floor.pid: 0.0}
            block = max(args.requests // 5, 1)
            for _ in range(args.requests // block):
                for pid, path, out in (
                    (service.pid, sock, served),
                    (floor.pid, floor_sock, trivial),
                ):
                    start = cpu_s(pid)
                    out.extend(latencies(path, body, block))
                    cpu[pid] += cpu_s(pid) - start
            # latencies() sends 50 more to warm up in every block
            cpu_per = {
                pid: t / (len(served) + 50 * (len(served) // block)) for pid, t in cpu.items()
            }
            if args.latency_only:
                latency_table(served, trivial, cpu_per[service.pid], cpu_per[floor.pid])
                return
            one_shot = shim_runs(args.shim_runs, body)
            done, took = asyncio.run(throughput(sock, args.clients, args.seconds))
            floor_done, floor_took = asyncio.run(
                throughput(floor_sock, args.clients, args.seconds / 2)
            )
            conn = Unix(sock)
            for i in range(100):
                post(conn, request(f"planned-{i}"))
            conn.close()
            rss_planned = vm_rss_kib(service.pid)
            # One monitor a sandbox: a VM is sized from one sandbox's requests only.
            with contextlib.ExitStack() as monitors:
                conn = Unix(sock)
                for i in range(100):
                    qmp = monitors.enter_context(
                        FakeQmpServer(Path(tmp) / f"qmp-{i}.sock", FakeQemu(maxmem=1 << 40))
                    )
                    post(
                        conn,
                        request(
                            f"vm-{i}", apply=True, backend={"type": "qmp", "socket": str(qmp.path)}
                        ),
                        tries=3,  # the fake monitor serves one client at a time
                    )
                conn.request("GET", "/metrics")
                conn.getresponse().read()
                conn.close()
                time.sleep(6)  # one pass of the reconcile loop over the 100
                rss_known = vm_rss_kib(service.pid)
        finally:
            for proc in (service, floor):
                if proc is not None and proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)

    ms = 1000.0
    p50 = latency_table(served, trivial, cpu_per[service.pid], cpu_per[floor.pid])
    s50, s99 = pct(one_shot, 50) * ms, pct(one_shot, 99) * ms
    print(f"\n{len(one_shot)} one-shot runs")
    print(
        f"| one-shot `python -m kata_mem shim` | {s50:.1f} ms | {s99:.1f} ms | | "
        f"{s50 / p50:.0f}x slower |"
    )
    print(
        f"\n| throughput, plan only, {args.clients} clients over {args.clients} sandboxes | "
        f"requests/s |\n| --- | --- |\n| `kata-mem serve` | {done / took:.0f} |\n"
        f"| floor | {floor_done / floor_took:.0f} |"
    )
    print(
        f"\n| `kata-mem serve` resident memory (VmRSS) | MiB |\n| --- | --- |\n"
        f"| started, idle | {rss_start / 1024:.1f} |\n"
        f"| after 100 sandboxes planned | {rss_planned / 1024:.1f} |\n"
        f"| 100 sandboxes applied and known (journals, metrics scraped, a loop pass) | "
        f"{rss_known / 1024:.1f} |"
    )


if __name__ == "__main__":
    main()
