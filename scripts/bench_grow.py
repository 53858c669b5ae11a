#!/usr/bin/env python3
"""Benchmark: a large grow, from a 512 MiB guest to 16 GiB, by ``kata-mem apply``
against one raw QMP plug of the same size, for pc-dimm (one DIMM: 48 x 512 MiB
allows it in one step) and virtio-mem. Each run boots a fresh guest, so every grow
starts from 512 MiB. Timed from the start of the call until the guest's own
MemTotal shows the new memory (read over the guest's control port while the grow
runs); the guest's MemFree during the grow is sampled alongside.

    .venv/bin/python scripts/bench_grow.py [--rounds 2] [--to-mib 16384]

Under TCG the guest's memory is host memory only where it is touched: a plug
touches the new memory's page structures (about 1.6% of it), not the memory itself.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_apply import inserted  # noqa: E402

from kata_mem.backends.qmp import VIRTIO_MEM_POLL_S, QmpBackend  # noqa: E402
from kata_mem.core.backing import dimm_backend  # noqa: E402
from kata_mem.core.model import Container, HostFacts, Workload  # noqa: E402
from kata_mem.edges.config import load_config  # noqa: E402
from kata_mem.edges.journal import SandboxState  # noqa: E402
from kata_mem.orchestration.executor import Options, run_locked  # noqa: E402
from tests.support.configs import write_config  # noqa: E402
from tests.support.guestvm import GuestMem, GuestSpec, GuestVM  # noqa: E402
from tests.support.qmp_min import QMPClient  # noqa: E402

MiB, GiB = 1 << 20, 1 << 30
BASE_MIB = 512
SHM = "/dev/shm" if os.path.isdir("/dev/shm") else None


class Sampler(threading.Thread):
    """Reads the guest's meminfo over its control port until stopped."""

    def __init__(self, vm: GuestVM) -> None:
        super().__init__(daemon=True)
        self.vm = vm
        self.samples: list[tuple[float, GuestMem]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.perf_counter(), self.vm.status()))


def raw_plug(sock: Path, virtio: bool, size: int) -> None:
    """One plug of ``size``, the essential commands only, waited for as kata-mem would."""
    with QMPClient(sock, timeout=120) as q:
        if virtio:
            q.execute(
                "qom-set",
                {"path": "/machine/peripheral/vm0", "property": "requested-size", "value": size},
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
        else:
            q.execute("object-add", {"qom-type": "memory-backend-ram", "id": "bmem0", "size": size})
            q.execute("device_add", {"driver": "pc-dimm", "id": "bdimm0", "memdev": "bmem0"})
            while not inserted(q.wait_event("ACPI_DEVICE_OST", timeout=120), "bdimm0"):
                pass


def kata_mem_grow(sock: Path, cfg_path: Path, state: Path, size: int, host: HostFacts) -> None:
    cfg = load_config(cfg_path)
    result = run_locked(
        SandboxState(state, "bench"),
        lambda: QmpBackend.connect(str(sock), dimm_backend=dimm_backend(cfg)),
        cfg,
        host,
        Workload((Container("c", size),)),
        Options(),
    )
    assert result.outcome.status == "Resized", result.outcome


def one(vm: GuestVM, grow: Callable[[], None], size: int) -> dict[str, Any]:
    """Time ``grow`` until MemTotal shows at least 97% of ``size`` more (the rest may go
    to the new memory's page structures), and the lowest MemFree meanwhile."""
    before = vm.status()
    sampler = Sampler(vm)
    start = time.perf_counter()
    sampler.start()
    grow()
    returned = time.perf_counter() - start
    want_kb = before.total_kb + size // 1024 * 97 // 100
    deadline = time.monotonic() + 120
    while not any(m.total_kb >= want_kb for _, m in sampler.samples):
        if time.monotonic() > deadline:
            raise TimeoutError(f"MemTotal did not show the grow: {sampler.samples[-1:]}")
        time.sleep(0.01)
    sampler.stop.set()
    sampler.join()
    shown = next(t for t, m in sampler.samples if m.total_kb >= want_kb) - start
    after = vm.status()
    return {
        "returned": returned,
        "shown": shown,
        "min_free_mib": min(m.free_kb for _, m in sampler.samples) // 1024,
        "free_before_mib": before.free_kb // 1024,
        "total_after_mib": after.total_kb // 1024,
        "samples": len(sampler.samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--to-mib", type=int, default=16384)
    args = parser.parse_args()
    guest_dir = Path(os.environ.get("KATA_MEM_GUEST_DIR") or ROOT / ".cache" / "guest")
    size = (args.to_mib - BASE_MIB) * MiB
    host = HostFacts(memory=max(args.to_mib + 1024, 24 * 1024) * MiB, cpus=2, arch="amd64")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-", dir=SHM) as tmp:
        work = Path(tmp)
        for mechanism in ("pc-dimm", "virtio-mem"):
            virtio = mechanism == "virtio-mem"
            cfg = write_config(
                work / f"{mechanism}.toml",
                {
                    "default_memory": BASE_MIB,
                    "default_maxmemory": args.to_mib,
                    "enable_virtio_mem": virtio,
                    # memory-backend-ram, as the raw plug it is compared with
                    "shared_fs": "none",
                },
                kata_mem={"step_timeout_s": 120},
            )
            spec = GuestSpec(
                base_mib=BASE_MIB,
                maxmem_mib=args.to_mib,
                virtio_mem_mib=args.to_mib - BASE_MIB if virtio else 0,
            )
            runs: dict[str, list[dict[str, Any]]] = {"kata-mem": [], "raw": []}
            for i in range(args.rounds):
                for side in ("kata-mem", "raw") if i % 2 == 0 else ("raw", "kata-mem"):
                    run_dir = work / f"{mechanism}-{side}-{i}"
                    with GuestVM(guest_dir, run_dir, spec) as vm:
                        grow = (
                            functools.partial(raw_plug, vm.qmp_socket, virtio, size)
                            if side == "raw"
                            else functools.partial(
                                kata_mem_grow, vm.qmp_socket, cfg, run_dir / "state", size, host
                            )
                        )
                        result = one(vm, grow, size)
                        result["alive"] = vm.is_alive() and vm.status().total_kb > 0
                    runs[side].append(result)
                    print(mechanism, side, result, flush=True)
            rows.append((mechanism, runs))
    print(
        f"\n{args.rounds} runs per side, {BASE_MIB} MiB -> {args.to_mib} MiB, fresh TCG guest each run\n"
    )
    print(
        f"| grow to {args.to_mib} MiB | side | call returned (median) | MemTotal shows it (median) "
        "| ratio | lowest MemFree during the grow | MemTotal after | guest alive |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for mechanism, runs in rows:
        raw_shown = statistics.median(r["shown"] for r in runs["raw"])
        for side in ("kata-mem", "raw"):
            rs = runs[side]
            shown = statistics.median(r["shown"] for r in rs)
            print(
                f"| {mechanism} | {side} | {statistics.median(r['returned'] for r in rs) * 1000:.0f} ms "
                f"| {shown * 1000:.0f} ms | {shown / raw_shown:.2f} "
                f"| {min(r['min_free_mib'] for r in rs)} MiB (from {min(r['free_before_mib'] for r in rs)}) "
                f"| {min(r['total_after_mib'] for r in rs)} MiB | {all(r['alive'] for r in rs)} |"
            )


if __name__ == "__main__":
    main()
