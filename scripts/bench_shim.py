#!/usr/bin/env python3
"""Benchmark: `kata-mem shim`, side by side in one run.

1. plan only, start to finish, against `python -c pass` (ratio of medians), with the
   import-time profile of the shim and the peak memory (max RSS) of both;
2. with apply, against `kata-mem apply` through the CLI, on a real guest in steady
   state (the common case on every container event: nothing to change), and for a
   +256 MiB growth.

kata-mem is installed (not editable, as a user has it) into a throw-away virtualenv,
so that the timings do not include the editable-install import hook.

    .venv/bin/python scripts/bench_shim.py [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.guestvm import GuestSpec, GuestVM  # noqa: E402
from tests.support.qmp_min import QMPClient  # noqa: E402

CONFIG = ROOT / "tests" / "fixtures" / "kata-configs" / "configuration-qemu.toml"


def timed(cmd: list[str], stdin: Optional[bytes] = None) -> float:
    start = time.perf_counter()
    subprocess.run(
        cmd, input=stdin, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - start


def rss(cmd: list[str], stdin: Optional[bytes] = None) -> int:
    """The command's own max RSS in KiB (wait4 on a fresh child)."""
    pid = os.fork()
    if pid == 0:  # child: exec the command with stdin from a pipe
        r, w = os.pipe()
        if os.fork() == 0:
            os.close(r)
            os.write(w, stdin or b"")
            os._exit(0)
        os.close(w)
        os.dup2(r, 0)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        os.execv(cmd[0], cmd)
    _, _, usage = os.wait4(pid, 0)
    return int(usage.ru_maxrss)


def interleave(
    a: list[str], b: list[str], runs: int, stdin_a: Optional[bytes] = None
) -> tuple[float, float]:
    ta, tb = [], []
    for _ in range(2):
        timed(a, stdin_a)
        timed(b)
    for _ in range(runs):
        ta.append(timed(a, stdin_a))
        tb.append(timed(b))
    return statistics.median(ta), statistics.median(tb)


def request(sock: Optional[str], limit_mib: int, config: Path) -> bytes:
    doc = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "bench",
        "event": "update",
        "config": str(config),
        "containers": [
            {
                "id": "c1",
                "state": "running",
                "memory_limit_bytes": limit_mib << 20,
                "cpu_quota": 50000,
                "cpu_period": 100000,
            }
        ],
        "backend": {"type": "qmp", "socket": sock} if sock else None,
        "apply": sock is not None,
        "host": {"memory_bytes": 32 << 30, "cpus": 8},
    }
    return json.dumps(doc).encode()


def import_profile(python: str, stdin: bytes) -> list[tuple[int, str]]:
    out = subprocess.run(
        [python, "-X", "importtime", "-m", "kata_mem", "shim"],
        input=stdin,
        capture_output=True,
        check=True,
    )
    rows = []
    for line in out.stderr.decode().splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            _, cumulative, name = line.split("|")
            if not name.startswith("  "):  # top-level imports only
                rows.append((int(cumulative), name.strip()))
    return sorted(rows, reverse=True)[:8]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(venv / "bin" / "pip"),
                "install",
                "-q",
                "--disable-pip-version-check",
                str(ROOT),
            ],
            check=True,
        )
        python, km = str(venv / "bin" / "python"), str(venv / "bin" / "kata-mem")

        plan_req = request(None, 256, CONFIG)
        shim_s, pass_s = interleave([km, "shim"], [python, "-c", "pass"], args.runs, plan_req)
        shim_rss, pass_rss = rss([km, "shim"], plan_req), rss([python, "-c", "pass"])
        profile = import_profile(python, plan_req)

        cfg = Path(tmp) / "c.toml"
        cfg.write_text(
            f'[hypervisor.qemu]\ndefault_memory = 512\ndefault_maxmemory = 4096\n[kata_mem]\nstate_dir = "{tmp}/state"\n'
        )
        with GuestVM(
            ROOT / ".cache" / "guest", Path(tmp) / "vm", GuestSpec(virtio_mem_mib=0)
        ) as vm:
            sock = str(vm.qmp_socket)
            cli = [
                km,
                "apply",
                "--config",
                str(cfg),
                "--qmp",
                sock,
                "--sandbox",
                "bench",
                "--limit",
                "256Mi",
                "--host-memory",
                "32Gi",
                "--host-cpus",
                "8",
                "--json",
            ]
            apply_req = request(sock, 256, cfg)
            subprocess.run(
                [km, "shim"], input=apply_req, check=True, capture_output=True
            )  # plug once: steady state
            steady_shim, steady_cli = interleave([km, "shim"], cli, args.runs, apply_req)

            grow_shim, grow_cli = [], []
            for i in range(6):
                for side in ("shim", "cli") if i % 2 == 0 else ("cli", "shim"):
                    with QMPClient(vm.qmp_socket) as q:  # back to nothing plugged (not timed)
                        for d in q.execute("query-memory-devices"):
                            q.execute("device_del", {"id": d["data"]["id"]})
                            q.wait_event("DEVICE_DELETED", timeout=30)
                            q.execute(
                                "object-del", {"id": d["data"]["memdev"].removeprefix("/objects/")}
                            )
                    start = time.perf_counter()
                    if side == "shim":
                        subprocess.run(
                            [km, "shim"], input=apply_req, check=True, capture_output=True
                        )
                        grow_shim.append(time.perf_counter() - start)
                    else:
                        subprocess.run(cli, check=True, capture_output=True)
                        grow_cli.append(time.perf_counter() - start)

    print(
        f"python {sys.version.split()[0]}, {args.runs} interleaved runs each, kata-mem installed non-editable\n"
    )
    print("| measurement | kata-mem | baseline | ratio |")
    print("| --- | --- | --- | --- |")
    print(
        f"| `kata-mem shim`, plan only, vs `python -c pass` | {shim_s * 1000:.0f} ms | {pass_s * 1000:.0f} ms | {shim_s / pass_s:.2f} |"
    )
    print(
        f"| peak memory (max RSS), same two | {shim_rss / 1024:.1f} MiB | {pass_rss / 1024:.1f} MiB | {shim_rss / pass_rss:.2f} |"
    )
    print(
        f"| `shim` with apply vs `kata-mem apply` (CLI), steady state (NoChange) | {steady_shim * 1000:.0f} ms | {steady_cli * 1000:.0f} ms | {steady_shim / steady_cli:.2f} |"
    )
    gs, gc = statistics.median(grow_shim), statistics.median(grow_cli)
    print(
        f"| `shim` with apply vs `kata-mem apply` (CLI), +256 MiB DIMM | {gs * 1000:.0f} ms | {gc * 1000:.0f} ms | {gs / gc:.2f} |"
    )
    print("\nshim import profile (top-level imports, cumulative µs):")
    for us, name in profile:
        print(f"  {us:>7}  {name}")


if __name__ == "__main__":
    main()
