#!/usr/bin/env python3
"""Benchmark: what kata-mem-nri and kata-mem serve add to a pod resize through a real
containerd, on the Kata pod of the end-to-end tests (tests/support/kata_pod.py: containerd,
serve, the plugin, a TCG guest standing for the pod's VM in its cgroup).

1. CRI ``UpdatePodSandboxResources`` with the values the pod already has (kata-mem: NoChange,
   after reading the VM), with the plugin registered against the same call with no NRI
   plugin at all, and against the plugin passing a runc pod through; p50 and p99 of the
   call as tests/go's cri-call times it (the gRPC call alone). Blocks of calls alternate
   between the sides so that machine noise hits them alike.
2. A pod-level grow of 1 GiB, timed from the CRI call to the guest's own MemTotal showing
   it, against raw QMP doing the same grow (object-add of the memory Kata's runtime-rs
   plugs, device_add of a DIMM, the guest's ACPI insert event) to the same MemTotal. The pod
   cgroup is raised first (the kubelet raises it only after the call: kata-mem would then
   finish the grow at the containers' update), so both grow in one go. Rounds alternate;
   between them the memory goes back (untimed).

    .venv/bin/python scripts/bench_nri.py [--series v2.3] [--blocks 5] [--per-block 20] [--rounds 5]

Needs what the node tests need: root, scripts/build-go.sh, scripts/build-node-rig.sh (the
rig is built on first use), the test guest (scripts/build-guest.sh).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.kata_pod import BOOT_MIB, OVERHEAD_MIB, MiB, Stack, kata_pod  # noqa: E402
from tests.support.node import (  # noqa: E402
    RUNC_HANDLER,
    SERIES,
    Rig,
    build_rig,
    hierarchy_path,
    resources,
)
from tests.support.qmp_min import QMPClient  # noqa: E402

GiB = 1 << 30
GROW_MIB = BOOT_MIB + 1024


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile, nearest rank (p99 of 100 calls is the 99th slowest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def calls(stack: Stack, pod: str, mib: int, n: int) -> list[float]:
    """``n`` UpdatePodSandboxResources of ``pod`` to ``mib`` (the same values each time),
    each one's milliseconds; every one must be OK."""
    took = []
    for _ in range(n):
        status = stack.node.update_sandbox(pod, memory=mib * MiB, overhead=OVERHEAD_MIB * MiB)
        if status.code != "OK":
            raise SystemExit(f"UpdatePodSandboxResources: {status}")
        took.append(status.elapsed_ms)
    return took


def no_change(stack: Stack, blocks: int, per_block: int) -> dict[str, list[float]]:
    """Part 1: the three sides, block by block."""
    runc_pod = stack.node.run_pod(
        "bench-runc",
        RUNC_HANDLER,
        hierarchy_path(stack.cg.path),
        resources=resources(memory=256 * MiB),
    )
    sides: dict[str, list[float]] = {
        "kata pod, plugin": [],
        "runc pod, plugin": [],
        "no plugin": [],
    }
    try:
        # kata-mem's first answer for the pod (its journal made) is not a NoChange's.
        calls(stack, stack.pod, BOOT_MIB, 3)
        for _ in range(blocks):
            sides["kata pod, plugin"] += calls(stack, stack.pod, BOOT_MIB, per_block)
            sides["runc pod, plugin"] += calls(stack, runc_pod, 256, per_block)
            stack.plugin.stop()
            sides["no plugin"] += calls(stack, stack.pod, BOOT_MIB, per_block)
            stack.plugin.start()
    finally:
        stack.node.stop_pod(runc_pod)
        stack.node.remove_pod(runc_pod)
    return sides


def guest_reaches(stack: Stack, total_kb: int, started: float) -> float:
    """Seconds from ``started`` until the guest's own MemTotal is ``total_kb``."""
    stack.vm.wait_mem(lambda m: m.total_kb == total_kb, timeout=60)
    return time.perf_counter() - started


#: The CRI call's own milliseconds, for each grow through kata-mem.
GROW_CALLS: list[float] = []


def grow_through_nri(stack: Stack) -> float:
    want = stack.boot_total_kb + 1024 * 1024
    started = time.perf_counter()
    status = stack.update_sandbox(GROW_MIB)
    GROW_CALLS.append(status.elapsed_ms)
    seconds = guest_reaches(stack, want, started)
    # Back to the boot size: the whole DIMM goes (the guest onlines movable).
    status = stack.update_sandbox(BOOT_MIB)
    if status.code != "OK":
        raise SystemExit(f"shrinking back: {status}")
    stack.guest_shows(0)
    return seconds


def inserted(event: dict[str, Any], device: str) -> bool:
    info = event["data"]["info"]
    return bool(
        info.get("device") == device and info.get("source") == 1 and info.get("status") == 0
    )


def grow_through_qmp(stack: Stack) -> float:
    """The same grow, the fewest QMP commands: runtime-rs's own (qmp.rs hotplug_pc_dimm: a
    shared file in /dev/shm), then the guest's MemTotal."""
    want = stack.boot_total_kb + 1024 * 1024
    started = time.perf_counter()
    with QMPClient(stack.vm.qmp_socket) as q:
        q.execute(
            "object-add",
            {
                "qom-type": "memory-backend-file",
                "id": "benchmem",
                "size": GiB,
                "mem-path": "/dev/shm",
                "share": True,
            },
        )
        q.execute("device_add", {"driver": "pc-dimm", "id": "benchdimm", "memdev": "benchmem"})
        while not inserted(q.wait_event("ACPI_DEVICE_OST", timeout=30), "benchdimm"):
            pass
        seconds = guest_reaches(stack, want, started)
        q.execute("device_del", {"id": "benchdimm"})
        q.wait_event("DEVICE_DELETED", timeout=30)
        q.execute("object-del", {"id": "benchmem"})
    stack.guest_shows(0)
    return seconds


def grows(stack: Stack, rounds: int) -> dict[str, list[float]]:
    """Part 2, alternating round by round."""
    stack.cg.set_limit((GROW_MIB + OVERHEAD_MIB) * MiB)
    sides: dict[str, list[float]] = {"CRI call through kata-mem": [], "raw QMP": []}
    for _ in range(rounds):
        sides["CRI call through kata-mem"].append(grow_through_nri(stack))
        sides["raw QMP"].append(grow_through_qmp(stack))
    return sides


def measure(
    rig: Rig, guest_dir: Path, args: argparse.Namespace, where: Path
) -> tuple[dict[str, list[float]], dict[str, list[float]], str]:
    with kata_pod(rig, guest_dir, args.series, where) as stack:
        return (
            no_change(stack, args.blocks, args.per_block),
            grows(stack, args.rounds),
            stack.node.version,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--series", choices=SERIES, default="v2.3")
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--per-block", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    guest_dir = Path(os.environ.get("KATA_MEM_GUEST_DIR") or ROOT / ".cache" / "guest")
    rig = build_rig()
    with tempfile.TemporaryDirectory(prefix="kata-mem-bench-nri-") as tmp:
        quick, slow, version = measure(rig, guest_dir, args, Path(tmp))
    print(f"containerd {version}, TCG guest; {args.blocks} blocks of {args.per_block} calls\n")
    print("| UpdatePodSandboxResources, NoChange | calls | p50 ms | p99 ms |")
    print("| --- | --- | --- | --- |")
    for side, values in quick.items():
        print(
            f"| {side} | {len(values)} | {percentile(values, 0.5):.1f} | {percentile(values, 0.99):.1f} |"
        )
    base = statistics.median(quick["no plugin"])
    print(
        f"\nkata pod with the plugin / no plugin, p50: {statistics.median(quick['kata pod, plugin']) / base:.2f}"
    )
    print("\n| +1 GiB to the guest's MemTotal | rounds | median s | min s | max s |")
    print("| --- | --- | --- | --- | --- |")
    for side, values in slow.items():
        print(
            f"| {side} | {len(values)} | {statistics.median(values):.2f} | {min(values):.2f} "
            f"| {max(values):.2f} |"
        )
    ratio = statistics.median(slow["CRI call through kata-mem"]) / statistics.median(
        slow["raw QMP"]
    )
    print(f"\nthrough kata-mem / raw QMP, median: {ratio:.2f}")
    print(
        "the UpdatePodSandboxResources call of the grow itself: median "
        f"{statistics.median(GROW_CALLS):.0f} ms, max {max(GROW_CALLS):.0f} ms (it returns once "
        "the guest has the memory)"
    )


if __name__ == "__main__":
    main()
