#!/usr/bin/env python3
"""Benchmark: shrink 1 GiB of virtio-mem from an idle guest, safely (every step
checked against fresh guest usage) against the unsafe ``--force`` path (no checks),
on the same guest, alternating round by round.

    .venv/bin/python scripts/bench_shrink.py [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kata_mem.backends.qmp import QmpBackend  # noqa: E402
from kata_mem.core.model import HostFacts, Workload  # noqa: E402
from kata_mem.edges.config import load_config  # noqa: E402
from kata_mem.edges.journal import SandboxState  # noqa: E402
from kata_mem.orchestration.executor import Options, run_locked  # noqa: E402
from tests.support.configs import write_config  # noqa: E402
from tests.support.guestvm import GuestSpec, GuestVM  # noqa: E402
from tests.support.qmp_min import QMPClient  # noqa: E402

GiB = 1 << 30
HOST = HostFacts(memory=16 * GiB, cpus=4, arch="amd64")


def plug_1g(sock: Path) -> None:
    """Back to 1 GiB plugged (not timed)."""
    with QMPClient(sock) as q:
        q.execute(
            "qom-set",
            {"path": "/machine/peripheral/vm0", "property": "requested-size", "value": GiB},
        )
        deadline = time.monotonic() + 30
        while (
            next(
                d["data"]["size"]
                for d in q.execute("query-memory-devices")
                if d["type"] == "virtio-mem"
            )
            != GiB
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("plug did not complete")
            time.sleep(0.02)
    time.sleep(1.5)  # let the guest settle and report statistics, as an idle guest would


def shrink(sock: Path, cfg_path: Path, state: Path, force: bool) -> int:
    cfg = load_config(cfg_path)
    options = Options(allow_shrink=True, force=force)
    result = run_locked(
        SandboxState(state, "bench"),
        lambda: QmpBackend.connect(str(sock)),
        cfg,
        HOST,
        Workload(),
        options,
    )
    assert result.outcome.status == "Resized", result.outcome
    return len(result.outcome.steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    guest_dir = Path(os.environ.get("KATA_MEM_GUEST_DIR") or ROOT / ".cache" / "guest")
    times: dict[str, list[float]] = {"safe": [], "force": []}
    steps = 0
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-") as tmp:
        work = Path(tmp)
        cfg = write_config(
            work / "c.toml",
            {"default_memory": 512, "default_maxmemory": 4096, "enable_virtio_mem": True},
        )
        with GuestVM(guest_dir, work / "guest", GuestSpec(virtio_mem_mib=2048)) as vm:
            for i in range(args.rounds + 1):  # round 0 warms up and is not counted
                for side in ("safe", "force") if i % 2 == 0 else ("force", "safe"):
                    plug_1g(vm.qmp_socket)
                    start = time.perf_counter()
                    steps = shrink(vm.qmp_socket, cfg, work / "state", side == "force")
                    if i:
                        times[side].append(time.perf_counter() - start)
    safe, force = statistics.median(times["safe"]), statistics.median(times["force"])
    print(
        f"{args.rounds} alternating rounds, 1 GiB -> 0 of virtio-mem in {steps} steps, idle TCG guest\n"
    )
    print("| shrink 1 GiB | median | ratio |")
    print("| --- | --- | --- |")
    print(f"| safe (checked steps) | {safe * 1000:.0f} ms | {safe / force:.2f} |")
    print(f"| `--force` (no checks) | {force * 1000:.0f} ms | 1.00 |")


if __name__ == "__main__":
    main()
