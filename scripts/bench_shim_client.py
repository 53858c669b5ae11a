#!/usr/bin/env python3
"""Benchmark: the shim path when the node service runs, side by side in one run.

Three commands in turn (A B C A B C ...), each a whole process answering the same plan-only
request (the shim guide's example: one container, the upstream QEMU configuration):

- ``python -c pass``: the interpreter alone, the floor;
- ``kata-mem-shim`` with ``kata-mem serve`` listening on ``KATA_MEM_SOCKET``: the request
  handed to the service (kata_mem/interfaces/shim_client.py);
- ``kata-mem shim``: the same request answered in-process.

Printed: each one's median and the ratios of the medians to the floor, and the median of the
per-round ratios (the machine's speed drifts; a round's three runs are back to back). The
answers are checked to be the same bytes. kata-mem is installed (not editable, as a user has
it) into a throw-away virtualenv, so that the timings do not include the editable-install
import hook.

    .venv/bin/python scripts/bench_shim_client.py [--runs 40]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tests" / "fixtures" / "kata-configs" / "configuration-qemu.toml"
REQUEST = json.dumps(
    {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "bench",
        "event": "update",
        "config": str(CONFIG),
        "containers": [{"id": "c1", "state": "running", "memory_limit_bytes": 256 << 20}],
        "backend": None,
        "apply": False,
        "host": {"memory_bytes": 32 << 30, "cpus": 8},
    }
).encode()


def timed(cmd: list[str], env: dict[str, str], stdin: bytes) -> tuple[float, bytes]:
    start = time.perf_counter()
    out = subprocess.run(cmd, input=stdin, env=env, check=True, capture_output=True).stdout
    return time.perf_counter() - start, out


def wait_for(sock: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"kata-mem serve exited {proc.returncode}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(sock))
                s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                if s.recv(16).split(b" ")[1] == b"200":
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit("kata-mem serve did not answer /healthz")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, str(ROOT)], check=True)
        bin_ = venv / "bin"
        sock = Path(tmp) / "kata-mem.sock"
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["KATA_MEM_SOCKET"] = str(sock)
        serve = subprocess.Popen(
            [str(bin_ / "kata-mem"), "serve", "--socket", str(sock), "--state-dir", f"{tmp}/state"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(sock, serve)
            commands = {
                "floor": [str(bin_ / "python"), "-c", "pass"],
                "client": [str(bin_ / "kata-mem-shim")],
                "shim": [str(bin_ / "kata-mem"), "shim"],
            }
            times: dict[str, list[float]] = {name: [] for name in commands}
            answers: dict[str, bytes] = {}
            for i in range(args.runs + 3):  # three rounds of warm-up, not counted
                for name, cmd in commands.items():
                    took, out = timed(cmd, env, REQUEST)
                    if i >= 3:
                        times[name].append(took)
                    if name != "floor":
                        answers.setdefault(name, out)
                        assert out == answers[name], f"{name} answered differently"
            assert answers["client"] == answers["shim"], "the service's answer differs"
        finally:
            serve.terminate()
            serve.wait(30)
    median = {name: statistics.median(t) for name, t in times.items()}
    per_round = {
        name: statistics.median(t / f for t, f in zip(times[name], times["floor"], strict=True))
        for name in ("client", "shim")
    }
    print(
        f"python {sys.version.split()[0]}, {args.runs} rounds of the three in turn, kata-mem "
        "installed non-editable; the same answer bytes from the service and in-process\n"
    )
    print("| command | median | ratio of medians to the floor | median of per-round ratios |")
    print("| --- | --- | --- | --- |")
    print(f"| `python -c pass` (floor) | {median['floor'] * 1000:.1f} ms | 1.00 | 1.00 |")
    for name, label in (
        ("client", "`kata-mem-shim`, service running"),
        ("shim", "`kata-mem shim`, in-process"),
    ):
        print(
            f"| {label} | {median[name] * 1000:.1f} ms | {median[name] / median['floor']:.2f} "
            f"| {per_round[name]:.2f} |"
        )


if __name__ == "__main__":
    main()
