#!/usr/bin/env python3
"""Benchmark: the node's ledger at 1, 100 and 1,000 sandboxes, side by side in one run.

With a node budget set (``node_overcommit``), every apply is admitted against the
commitments of every other sandbox of the node. This measures, for state directories of
1, 100 and 1,000 sandboxes, interleaved round by round so that the machine's drift hits
every size alike:

1. ``apply`` in-process (:func:`kata_mem.handle`, so Python's start-up is not in it) of a
   NoChange (the steady state) and of a small grow (one 256 MiB DIMM);
2. the same two as ``POST /v1/shim`` to a ``kata-mem serve`` of that state directory;
3. ``GET /v1/node`` of that service and a one-shot ``kata-mem status --all --json``, reading
   the files, and again while that service runs (which it asks, since issue 36);
4. the service's resident memory (VmRSS) and, with its reconcile loop at the default
   interval, the CPU it spends while idle, once its start-up pass is done (that pass is
   reported on its own, as is what the safety net's full pass every ten minutes costs,
   timed in this process on the same state directory);
5. admission against the node's other sandboxes (``--admission 20,300``): two services at
   the default interval, their loops running as on a node, with a node budget on, over
   state directories of 20 and of 300 sandboxes; round by round, alternating, each is asked
   for a ``POST /v1/shim`` grow (+256 MiB DIMM) of one of its sandboxes, and for the first
   request of a new one (a grow as well), each undone again untimed (``--admission-only``:
   this part alone).

    .venv/bin/python scripts/bench_ledger.py [--rounds 30] [--sizes 1,100,1000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.configs import write_config  # noqa: E402
from tests.support.fake_qmp import FakeQemu  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30
BOOT_MIB = 256
HOST_MEMORY = 512 * GiB
#: Sockets of one size: the probe (measured) and the others (in the state directory).
PROBE = "probe"
#: A VM of no sandbox of the node, for the admission part's new sandboxes.
SPARE = "spare"
GROW = "a grow (+256 MiB DIMM) of a sandbox of the node"
FIRST = "the first request of a new sandbox (a grow too)"


# -- the farm: many scripted QMP servers in one process ------------------------------------


class _Session(asyncio.Protocol):
    """One QMP connection to one :class:`FakeQemu`."""

    def __init__(self, qemu: FakeQemu) -> None:
        self.qemu = qemu
        self.buf = ""
        self.decoder = json.JSONDecoder()
        self.transport: Optional[asyncio.Transport] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        version = {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "bench"}
        greeting = {"QMP": {"version": version, "capabilities": []}}
        transport.write(json.dumps(greeting).encode() + b"\r\n")

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buf += data.decode()
        while self.buf.strip():
            self.buf = self.buf.lstrip()
            try:
                msg, end = self.decoder.raw_decode(self.buf)
            except json.JSONDecodeError:
                return  # the rest of the message is on its way
            self.buf = self.buf[end:]
            cmd = str(msg.get("execute", ""))
            if cmd == "x-bench-reset":
                self.qemu.devices.clear()
                self.qemu.objects.clear()
                reply: Optional[dict[str, Any]] = {"return": {}}
                events: list[dict[str, Any]] = []
            else:
                reply, events = self.qemu.handle(cmd, dict(msg.get("arguments") or {}))
                self.qemu.commands.clear()  # the farm keeps no history
            if reply is not None:
                if "id" in msg:
                    reply["id"] = msg["id"]
                self.transport.write(json.dumps(reply).encode() + b"\r\n")
            for event in events:
                self.transport.write(json.dumps(event).encode() + b"\r\n")


async def _farm(paths: list[str]) -> None:
    loop = asyncio.get_running_loop()
    for path in paths:
        qemu = FakeQemu(base=BOOT_MIB * MiB, slots=8, maxmem=64 * GiB)
        await loop.create_unix_server(lambda q=qemu: _Session(q), path)  # type: ignore[misc]
    print("ready", flush=True)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()


def farm_main(listing: str) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(_farm(Path(listing).read_text().split()))


def bench_reset(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)
        reader = s.makefile("rb")
        reader.readline()  # the greeting
        s.sendall(b'{"execute": "x-bench-reset"}')
        reader.readline()


# -- requests ------------------------------------------------------------------------------


def shim_doc(sandbox: str, qmp: str, config: Path, grow: bool, event: str = "update") -> bytes:
    containers = [{"id": "c1", "state": "running"}]
    if grow:
        containers[0]["memory_limit_bytes"] = 256 * MiB  # type: ignore[assignment]
    doc = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": sandbox,
        "event": event,
        "config": str(config),
        "containers": containers,
        "backend": {"type": "qmp", "socket": qmp},
        "apply": event != "delete",
        "host": {"memory_bytes": HOST_MEMORY, "cpus": 8},
    }
    return json.dumps(doc).encode()


class Unix(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=120)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


def http_call(conn: Unix, method: str, path: str, body: Optional[bytes] = None) -> bytes:
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise SystemExit(f"{method} {path}: HTTP {resp.status}: {data[:400]!r}")
    return data


def check_outcome(doc: dict[str, Any], want: str) -> None:
    outcome = doc.get("outcome") or {}
    if doc.get("error") or outcome.get("status") != want:
        raise SystemExit(f"expected {want}: {json.dumps(doc)[:600]}")


class Size:
    """One state directory of ``count`` sandboxes, its VMs and its service."""

    def __init__(self, count: int, tmp: Path, config: Path, tag: str = "") -> None:
        self.count = count
        self.tag = tag or str(count)
        self.config = config
        self.state = tmp / f"state-{self.tag}"
        self.qmp = tmp / "qmp"
        self.names = [PROBE] + [f"sb-{i:04d}" for i in range(count - 1)]
        self.sock = str(tmp / f"serve-{self.tag}.sock")
        self.service: Optional[subprocess.Popen[bytes]] = None
        self.conn: Optional[Unix] = None
        self.times: dict[str, list[float]] = {}

    def qmp_path(self, name: str) -> str:
        return str(self.qmp / f"{self.tag}-{name}.sock")

    def request(self, name: str, grow: bool = False, event: str = "update") -> Any:
        from kata_mem.core.request import SandboxRequest

        return SandboxRequest.from_json(
            shim_doc(name, self.qmp_path(name), self.config, grow, event)
        )

    def handle(self, name: str, grow: bool = False, event: str = "update") -> str:
        from kata_mem import Applied, CallOptions, handle

        done = handle(
            self.request(name, grow, event), os.environ, CallOptions(state_dir=str(self.state))
        )
        return done.outcome.status if isinstance(done, Applied) else "Forgotten"

    def record(self, what: str, seconds: float, counted: bool) -> None:
        if counted:
            self.times.setdefault(what, []).append(seconds)

    def reset_probe(self, via_service: bool) -> None:
        """Forget the probe, empty its VM and apply its steady state again (untimed)."""
        if via_service:
            assert self.conn is not None
            http_call(self.conn, "POST", "/v1/shim", self.doc(PROBE, event="delete"))
        else:
            self.handle(PROBE, event="delete")
        bench_reset(self.qmp_path(PROBE))
        if via_service:
            assert self.conn is not None
            check_outcome(
                json.loads(http_call(self.conn, "POST", "/v1/shim", self.doc(PROBE))), "NoChange"
            )
        else:
            assert self.handle(PROBE) == "NoChange"

    def doc(self, name: str, grow: bool = False, event: str = "update") -> bytes:
        return shim_doc(name, self.qmp_path(name), self.config, grow, event)

    def in_process(self, counted: bool) -> None:
        t0 = time.perf_counter()
        status = self.handle(PROBE)
        self.record("apply NoChange", time.perf_counter() - t0, counted)
        assert status == "NoChange", status
        t0 = time.perf_counter()
        status = self.handle(PROBE, grow=True)
        self.record("apply +256 MiB DIMM", time.perf_counter() - t0, counted)
        assert status == "Resized", status
        self.reset_probe(via_service=False)

    def served(self, counted: bool) -> None:
        assert self.conn is not None
        for what, grow, want in (
            ("POST /v1/shim NoChange", False, "NoChange"),
            ("POST /v1/shim +256 MiB DIMM", True, "Resized"),
        ):
            body = self.doc(PROBE, grow)
            t0 = time.perf_counter()
            data = http_call(self.conn, "POST", "/v1/shim", body)
            self.record(what, time.perf_counter() - t0, counted)
            check_outcome(json.loads(data), want)
        t0 = time.perf_counter()
        node = json.loads(http_call(self.conn, "GET", "/v1/node"))
        self.record("GET /v1/node", time.perf_counter() - t0, counted)
        if len(node["sandboxes"]) != self.count:
            raise SystemExit(f"GET /v1/node: {len(node['sandboxes'])} sandboxes, not {self.count}")
        self.reset_probe(via_service=True)

    def status_all(self, counted: bool) -> None:
        """``status --all --json`` as a process, twice: reading the files (no service at
        ``$KATA_MEM_SOCKET``, and ``--host-memory``, which the service does not take), and
        with this size's service at ``$KATA_MEM_SOCKET`` (a kata-mem before issue 36 reads
        the files then too)."""
        base = [sys.executable, "-m", "kata_mem", "status", "--all", "--json"]
        base += ["--config", str(self.config), "--state-dir", str(self.state)]
        # As installed: from bytecode, compiled once (a wheel's install compiles it; round 0,
        # not counted, does it here), not from source on every start, as
        # PYTHONDONTWRITEBYTECODE in a checkout without __pycache__ has it (a third of a
        # second of compiling, which no installed kata-mem pays).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(self.state.parent / "pycache")
        files = [*base, "--host-memory", f"{HOST_MEMORY // GiB}Gi"]
        for what, cmd, listening in (
            ("status --all --json (a process)", files, str(self.state.parent / "none.sock")),
            ("status --all --json (a process, serve running)", base, self.sock),
        ):
            t0 = time.perf_counter()
            out = subprocess.run(
                cmd,
                cwd=ROOT,
                env={**env, "KATA_MEM_SOCKET": listening},
                check=True,
                capture_output=True,
            ).stdout
            self.record(what, time.perf_counter() - t0, counted)
            if len(json.loads(out)["sandboxes"]) != self.count:
                raise SystemExit(f"{what}: wrong number of sandboxes")

    # -- the service --

    def start_service(self, interval: float) -> None:
        cmd = [sys.executable, "-m", "kata_mem", "serve", "--socket", self.sock]
        cmd += ["--state-dir", str(self.state), "--config", str(self.config)]
        cmd += ["--reconcile-interval", str(interval)]
        self.service = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.DEVNULL)
        for _ in range(600):
            if self.service.poll() is not None:
                raise SystemExit(f"serve exited {self.service.returncode}")
            try:
                conn = Unix(self.sock)
                http_call(conn, "GET", "/healthz")
                self.conn = conn
                return
            except OSError:
                time.sleep(0.05)
        raise SystemExit(f"{self.sock}: not ready")

    def stop_service(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        if self.service is not None and self.service.poll() is None:
            self.service.send_signal(signal.SIGCONT)
            self.service.send_signal(signal.SIGTERM)
            self.service.wait(60)
        self.service = None

    @contextmanager
    def awake(self) -> Iterator[None]:
        """A fresh connection to the service for its own size's measurements. The services
        run throughout, as on a node (they read what the in-process applies change in
        their state directories): stopping one with SIGSTOP could leave it holding the
        state directory's shared node lock, which an apply then waits for forever."""
        assert self.service is not None
        # A new connection: the kept-alive one may have outlived the service's keep-alive
        # timeout since it was last used, and be closed as the next request is sent.
        if self.conn is not None:
            self.conn.close()
        self.conn = Unix(self.sock)
        http_call(self.conn, "GET", "/healthz")  # connected, untimed
        yield

    def rss_mib(self) -> float:
        assert self.service is not None
        for line in Path(f"/proc/{self.service.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise SystemExit("no VmRSS")

    def metric(self, name: str) -> float:
        """A sample of the service's /metrics (0 when it has none)."""
        assert self.conn is not None
        for line in http_call(self.conn, "GET", "/metrics").decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    def settled(self) -> None:
        """Wait until the service's start-up pass is done (its loop counts a full pass)."""
        assert self.conn is not None
        if b"kata_mem_reconcile_full_passes" not in http_call(self.conn, "GET", "/metrics"):
            time.sleep(6.0)  # a kata-mem before issue 36: its first pass, after 5 s, is done
            return
        for _ in range(1200):
            if self.metric("kata_mem_reconcile_full_passes_total") >= 1:
                return
            time.sleep(0.1)
        raise SystemExit(f"{self.sock}: no full pass within 120 s")

    def cpu_s(self) -> float:
        """The service's CPU time so far, every thread's, in nanoseconds from the
        scheduler (``/proc/PID/task/TID/schedstat``, its first field): clock ticks (10 ms)
        are too coarse for an idle process over 20 s."""
        assert self.service is not None
        total = 0
        for task in Path(f"/proc/{self.service.pid}/task").iterdir():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--sizes", default="1,100,1000")
    parser.add_argument("--status-every", type=int, default=3, help="status --all every Nth round")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--admission", default="20,300", help="the two node sizes ('': none)")
    parser.add_argument("--admission-rounds", type=int, default=40)
    parser.add_argument("--admission-only", action="store_true")
    parser.add_argument("--farm", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.farm:
        farm_main(args.farm)
        return
    counts = [int(c) for c in args.sizes.split(",")]
    env_clean = {
        k: v for k, v in os.environ.items() if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG")
    }
    os.environ.clear()
    os.environ.update(env_clean)
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-ledger-") as name:
        tmp = Path(name)
        (tmp / "qmp").mkdir()
        config = write_config(
            tmp / "configuration.toml",
            {"default_memory": BOOT_MIB, "default_maxmemory": 0, "memory_slots": 8},
            kata_mem={"node_overcommit": 1.0},
        )
        sizes = [Size(c, tmp, config) for c in counts]
        pair = [Size(int(c), tmp, config, tag=f"a{c}") for c in args.admission.split(",") if c]
        if args.admission_only:
            sizes = []
        listing = tmp / "farm.txt"
        every = sizes + pair
        listing.write_text("\n".join(s.qmp_path(n) for s in every for n in [*s.names, SPARE]))
        farm = subprocess.Popen(
            [sys.executable, __file__, "--farm", str(listing)], stdout=subprocess.PIPE
        )
        try:
            assert farm.stdout is not None
            if farm.stdout.readline().strip() != b"ready":
                raise SystemExit("the QMP farm did not start")
            run(sizes, args, pair)
        finally:
            for s in every:
                s.stop_service()
            farm.send_signal(signal.SIGTERM)
            farm.wait(30)


def safety_pass_ms(state: Path) -> float:
    """What the loop's full pass after the first reads, in this process, on a state
    directory a pass read before (best of 5): the view's listing and each entry's files
    compared by ``stat``; no VM is asked (the kernel watches them)."""
    try:
        from kata_mem.interfaces.node_view import NodeView
    except ImportError:  # a kata-mem before issue 36: every pass was a full one
        return float("nan")
    view = NodeView(str(state))

    async def inline(fn: Any) -> Any:
        return fn()

    async def once() -> float:
        view.start(asyncio.get_running_loop(), lambda: None)
        try:
            await view.sync(inline)
            best = float("inf")
            for _ in range(5):
                t0 = time.perf_counter()
                view.everything = True
                await view.sync(inline)
                best = min(best, time.perf_counter() - t0)
            return best * 1000
        finally:
            view.close()

    return asyncio.run(once())


def admission(pair: list[Size], rounds: int) -> dict[str, dict[int, list[float]]]:
    """Through each service in turn, round by round: a grow of a sandbox of the node (the
    probe; emptied again after, untimed), and the first request of a new sandbox, a grow
    too (its VM a spare one; forgotten again after, untimed)."""
    for s in pair:
        s.start_service(interval=5.0)  # the default interval: the loop as a node runs it
        s.settled()
    times: dict[str, dict[int, list[float]]] = {GROW: {}, FIRST: {}}
    try:
        for i in range(rounds + 1):  # round 0 warms up and is not counted
            for s in pair[i % 2 :] + pair[: i % 2]:
                with s.awake():  # a fresh connection: the other service's turn was long
                    assert s.conn is not None
                    for what, name, vm in ((GROW, PROBE, PROBE), (FIRST, f"new-{i:04d}", SPARE)):
                        body = shim_doc(name, s.qmp_path(vm), s.config, grow=True)
                        t0 = time.perf_counter()
                        data = http_call(s.conn, "POST", "/v1/shim", body)
                        if i:
                            times[what].setdefault(s.count, []).append(time.perf_counter() - t0)
                        check_outcome(json.loads(data), "Resized")
                    s.reset_probe(via_service=True)
                    forget = shim_doc(f"new-{i:04d}", s.qmp_path(SPARE), s.config, False, "delete")
                    http_call(s.conn, "POST", "/v1/shim", forget)
                    bench_reset(s.qmp_path(SPARE))
    finally:
        for s in pair:
            s.stop_service()
    return times


def run(sizes: list[Size], args: argparse.Namespace, pair: list[Size]) -> None:
    t0 = time.perf_counter()
    for s in sizes + pair:  # every sandbox applied once: journals, saved requests, the ledger
        for name in s.names:
            assert s.handle(name) == "NoChange"
    setup_s = time.perf_counter() - t0
    for s in sizes:
        s.start_service(interval=3600)  # the loop's cost is measured on its own, below
    for i in range(args.rounds + 1 if sizes else 0):  # round 0 warms up, not counted
        order = sizes[i % len(sizes) :] + sizes[: i % len(sizes)]
        for s in order:
            s.in_process(counted=i > 0)
        for s in order:
            with s.awake():
                s.served(counted=i > 0)
        if i % args.status_every == 0:
            for s in order:
                s.status_all(counted=i > 0)
    rss: dict[int, float] = {}
    for s in sizes:
        with s.awake():
            assert s.conn is not None
            http_call(s.conn, "GET", "/metrics")
            rss[s.count] = s.rss_mib()
        s.stop_service()
    # An idle service with the loop at its default interval: what it costs to keep watching.
    idle: dict[int, tuple[float, float, float, float]] = {}
    for s in sizes:
        s.start_service(interval=5.0)
        s.settled()
        time.sleep(1.0)  # the start-up pass's last visits logged and counted
        start = s.cpu_s()
        time.sleep(args.idle_seconds)
        cpu = 100 * (s.cpu_s() - start) / args.idle_seconds
        idle[s.count] = (cpu, s.rss_mib(), start, safety_pass_ms(s.state))
        s.stop_service()
    admitted = admission(pair, args.admission_rounds) if pair else None
    report(sizes, args, setup_s, rss, idle, admitted)


def report(
    sizes: list[Size],
    args: argparse.Namespace,
    setup_s: float,
    rss: dict[int, float],
    idle: dict[int, tuple[float, float, float, float]],
    admitted: Optional[dict[str, dict[int, list[float]]]],
) -> None:
    if sizes:
        report_sizes(sizes, args, setup_s, rss, idle)
    if admitted is not None:
        print("\nadmission, `POST /v1/shim`, the loop every 5 s (medians):\n")
        counts = sorted(admitted[GROW])
        print("| | " + " | ".join(f"{c} sandboxes" for c in counts) + " | ratio |")
        print("| --- |" + " --- |" * (len(counts) + 1))
        for what, by in admitted.items():
            values = [median_ms(by[c]) for c in counts]
            cells = " | ".join(f"{v:.2f} ms" for v in values)
            print(f"| {what} | {cells} | {values[-1] / values[0]:.2f}x |")


def report_sizes(
    sizes: list[Size],
    args: argparse.Namespace,
    setup_s: float,
    rss: dict[int, float],
    idle: dict[int, tuple[float, float, float, float]],
) -> None:
    base = sizes[0]
    total = sum(s.count for s in sizes)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.rounds} interleaved "
        f"rounds; node_overcommit = 1.0; {total} sandboxes set up in {setup_s:.1f} s "
        f"({1000 * setup_s / total:.1f} ms an apply)\n"
    )
    heads = " | ".join(f"{s.count:,} sandboxes" for s in sizes)
    ratios = " | ".join(f"{s.count:,}/{base.count:,}" for s in sizes[1:])
    print(f"| median | {heads} | {ratios} |")
    print("| --- |" + " --- |" * (2 * len(sizes) - 1))
    for what in base.times:
        row = [median_ms(s.times[what]) for s in sizes]
        cells = " | ".join(f"{v:.2f} ms" for v in row)
        rel = " | ".join(f"{v / row[0]:.2f}x" for v in row[1:])
        print(f"| {what} | {cells} | {rel} |")
    print("\n| `kata-mem serve` | " + heads + " |")
    print("| --- |" + " --- |" * len(sizes))
    print(
        "| VmRSS after the rounds, `/metrics` scraped | "
        + " | ".join(f"{rss[s.count]:.1f} MiB" for s in sizes)
        + " |"
    )
    print(
        f"| idle, loop every 5 s: CPU over {args.idle_seconds:g} s | "
        + " | ".join(f"{idle[s.count][0]:.2f} %" for s in sizes)
        + " |"
    )
    print(
        "| idle: VmRSS after it | "
        + " | ".join(f"{idle[s.count][1]:.1f} MiB" for s in sizes)
        + " |"
    )
    print(
        "| CPU from start to the end of the start-up pass (imports, every sandbox visited) | "
        + " | ".join(f"{idle[s.count][2]:.2f} s" for s in sizes)
        + " |"
    )
    print(
        "| the safety net's full pass (every 600 s), in-process, best of 5 | "
        + " | ".join(f"{idle[s.count][3]:.1f} ms" for s in sizes)
        + " |"
    )
    print(
        "| idle CPU with that pass spread over its 600 s | "
        + " | ".join(
            f"{idle[s.count][0] + 100 * idle[s.count][3] / 1000 / 600:.2f} %" for s in sizes
        )
        + " |"
    )


if __name__ == "__main__":
    main()
