#!/usr/bin/env python3
"""Benchmark: a 512 MiB guest onlining hot-added memory to a kernel zone, grown
to 40 GiB by ``kata-mem apply`` in stages (each step within what the guest can describe,
the next after the guest shows it), against one raw plug of the largest size such a guest
survives in one step (16 GiB: 3/4 x 512 MiB less the 128 MiB headroom of struct pages,
64 bytes per 4 KiB page). Timed, as bench_grow.py times it, from the call's start until
the guest's own MemTotal shows at least 97% of what was added. A fresh guest per run.

    KATA_MEM_GUEST_DIR=.cache/guest .venv/bin/python scripts/bench_staged_grow.py [--rounds 2]

virtio-mem only: its 40 GiB region is a ``memory-backend-ram`` with ``reserve=off``, so
it reserves nothing on the host (a staged pc-dimm grow plugs a 24 GiB DIMM, which a
24 GiB machine backs only with ``vm.overcommit_memory=1``; this script changes no sysctl).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_grow import one  # noqa: E402

from kata_mem.backends.qmp import VIRTIO_MEM_POLL_S, QmpBackend  # noqa: E402
from kata_mem.core.backing import dimm_backend  # noqa: E402
from kata_mem.core.model import Container, HostFacts, Workload  # noqa: E402
from kata_mem.edges.config import load_config  # noqa: E402
from kata_mem.edges.journal import SandboxState  # noqa: E402
from kata_mem.orchestration.executor import Options, run_locked  # noqa: E402
from tests.support.configs import write_config  # noqa: E402
from tests.support.guestvm import GuestSpec, GuestVM  # noqa: E402
from tests.support.qmp_min import QMPClient  # noqa: E402

MiB = 1 << 20
BASE_MIB, TO_MIB, SURVIVABLE_MIB = 512, 512 + 40 * 1024, 16384
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None
SPEC = GuestSpec(
    base_mib=BASE_MIB,
    maxmem_mib=48 * 1024,
    virtio_mem_mib=0,
    online_state="online_kernel",
    extra_qemu_args=(
        "-object", "memory-backend-ram,id=bigmem,size=40G,reserve=off",
        "-device", "pcie-root-port,id=rp1,bus=pcie.0,chassis=1,slot=1",
        "-device",
        "virtio-mem-pci,id=virtiomem0,memdev=bigmem,requested-size=0,block-size=2M,bus=rp1",
    ),
)  # fmt: skip


def raw_plug(sock: Path, size: int) -> None:
    """One ``requested-size`` change, waited for until QEMU reports it plugged."""
    with QMPClient(sock, timeout=120) as q:
        q.execute(
            "qom-set",
            {"path": "/machine/peripheral/virtiomem0", "property": "requested-size", "value": size},
        )
        while (
            next(
                d["data"]["size"]
                for d in q.execute("query-memory-devices")
                if d["type"] == "virtio-mem"
            )
            != size
        ):
            time.sleep(VIRTIO_MEM_POLL_S)


def staged(sock: Path, cfg_path: Path, state: Path, host: HostFacts) -> None:
    cfg = load_config(cfg_path)
    result = run_locked(
        SandboxState(state, "bench"),
        lambda: QmpBackend.connect(str(sock), dimm_backend=dimm_backend(cfg)),
        cfg,
        host,
        Workload((Container("c", (TO_MIB - BASE_MIB) * MiB),)),
        Options(),
    )
    assert result.outcome.status == "Resized", result.outcome
    print("  steps:", [s.size // MiB for s in result.outcome.steps], flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    guest_dir = Path(os.environ.get("KATA_MEM_GUEST_DIR") or ROOT / ".cache" / "guest")
    host = HostFacts(memory=64 * 1024 * MiB, cpus=2, arch="amd64")
    runs: dict[str, list[dict[str, Any]]] = {"staged": [], "one plug": []}
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-", dir=SHM) as tmp:
        work = Path(tmp)
        cfg = write_config(
            work / "configuration.toml",
            {
                "default_memory": BASE_MIB,
                "enable_virtio_mem": True,
                "kernel_params": "memhp_default_state=online_kernel",
            },
            kata_mem={"step_timeout_s": 120},
        )
        for i in range(args.rounds):
            for side in ("staged", "one plug") if i % 2 == 0 else ("one plug", "staged"):
                run_dir = work / f"{side.replace(' ', '-')}-{i}"
                added = (TO_MIB - BASE_MIB if side == "staged" else SURVIVABLE_MIB) * MiB
                with GuestVM(guest_dir, run_dir, SPEC) as vm:
                    grow = (
                        functools.partial(staged, vm.qmp_socket, cfg, run_dir / "state", host)
                        if side == "staged"
                        else functools.partial(raw_plug, vm.qmp_socket, added)
                    )
                    result = one(vm, grow, added)
                    result["alive"] = vm.is_alive() and vm.status().total_kb > 0
                    result["gib"] = added / (1 << 30)
                runs[side].append(result)
                print(side, result, flush=True)
    print(f"\n{args.rounds} runs per side, virtio-mem, kernel onlining, fresh TCG guest each run\n")
    print(
        "| side | added | call returned (median) | MemTotal shows it (median) | per GiB | guest alive |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for side, rs in runs.items():
        shown = statistics.median(r["shown"] for r in rs)
        gib = rs[0]["gib"]
        print(
            f"| {side} | {gib:g} GiB | {statistics.median(r['returned'] for r in rs) * 1000:.0f} ms "
            f"| {shown * 1000:.0f} ms | {shown * 1000 / gib:.0f} ms "
            f"| {all(r['alive'] for r in rs)} |"
        )


if __name__ == "__main__":
    main()
