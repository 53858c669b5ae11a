#!/usr/bin/env python3
"""Measure what QEMU uses on the host beyond guest RAM (the VMM overhead), on this machine.

Boots the test guest (the same QEMU command line as the guest tests, TCG) once per case,
each QEMU in a fresh cgroup v1 memory cgroup created under this process's own, grows the
virtio-mem device when the case has one, lets the guest pin as much of its memory as it
can, then reads the cgroup's charge and QEMU's mappings (/proc/PID/smaps). The guest RAM
QEMU really holds is the RSS of its RAM mappings; everything else charged is overhead.
The TCG translation buffer (an anonymous rwx mapping, lazily touched, up to -accel
tcg,tb-size) is shown on its own: KVM has none. Prints a table and the fit
``overhead = fixed + per_gib * guest GiB`` (MiB, rounded up, every case under the line).

    KATA_MEM_GUEST_DIR=.cache/guest .venv/bin/python scripts/measure_vmm_overhead.py \
        [--cases 512,1024,2048,512+1536]

A case is ``BOOT`` or ``BOOT+VIRTIO_MEM`` in MiB. Needs root (cgroup v1 memory at
/sys/fs/cgroup/memory); ``--no-cgroup`` reads RSS only.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.guestvm import GuestSpec, GuestVM  # noqa: E402
from tests.support.qmp_min import QMPClient  # noqa: E402

MiB = 1 << 20
KiB = 1 << 10
CGROUP_V1_MEMORY = Path("/sys/fs/cgroup/memory")
# What the guest's alloc keeps free (init.sh ALLOC_RESERVE_MIB) plus slack for the
# status read racing the guest's own allocations: asking for more is refused.
GUEST_RESERVE_MIB = 48 + 16
ALLOC_CHUNK_MIB = 512


@dataclass(frozen=True)
class Case:
    boot_mib: int
    virtio_mem_mib: int

    @classmethod
    def parse(cls, text: str) -> Case:
        boot, _, vmem = text.partition("+")
        try:
            case = cls(int(boot), int(vmem or "0"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"case {text!r}: expected BOOT or BOOT+VIRTIO_MEM in MiB, e.g. 512+1536"
            ) from None
        if case.boot_mib < 256 or case.virtio_mem_mib < 0 or case.virtio_mem_mib % 2:
            raise argparse.ArgumentTypeError(
                f"case {text!r}: boot must be >= 256 MiB, virtio-mem a multiple of 2 MiB"
            )
        return case

    @property
    def guest_mib(self) -> int:
        return self.boot_mib + self.virtio_mem_mib

    def __str__(self) -> str:
        return (
            f"{self.boot_mib}+{self.virtio_mem_mib}" if self.virtio_mem_mib else str(self.boot_mib)
        )


@dataclass(frozen=True)
class Mapping:
    perms: str
    path: str
    size: int
    rss: int


@dataclass(frozen=True)
class Result:
    case: Case
    guest_total_mib: int  # guest MemTotal after growing
    pinned_mib: int  # what the guest pinned (tmpfs)
    ram_rss: int  # RSS of QEMU's guest RAM mappings
    tcg_rss: int  # RSS of the TCG translation buffer
    tcg_size: int
    file_rss: int  # file-backed RSS (binary, libraries, vmlinux mapped privately)
    other_anon_rss: int  # QEMU's own heap, stacks, device state
    vm_rss: int
    vm_hwm: int
    usage: Optional[int]  # cgroup memory.usage_in_bytes
    max_usage: Optional[int]
    cache: Optional[int]  # cgroup memory.stat total_cache
    kernel: Optional[int]  # memory.kmem.usage_in_bytes (page tables, slabs)

    def overhead(self, basis: str, tcg: bool) -> int:
        """What QEMU holds beyond the guest RAM it backs, at its peak; TCG buffer optional.

        ``cgroup``: the cgroup's peak charge (file pages that another cgroup faulted in first
        are not charged here). ``rss``: VmHWM, counting every file page QEMU maps as if this
        cgroup had been the first to read it (a node where nothing else runs QEMU).
        """
        if basis == "cgroup":
            if self.max_usage is None:
                raise ValueError("no cgroup measurement")
            charged = self.max_usage
        else:
            charged = self.vm_hwm
        return charged - self.ram_rss - (0 if tcg else self.tcg_rss)


def read_smaps(pid: int) -> list[Mapping]:
    maps: list[Mapping] = []
    perms = path = ""
    size = 0
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split()
        if not head:
            continue
        if "-" in head[0] and not head[0].endswith(":"):
            perms, path = head[1], " ".join(head[5:])
        elif head[0] == "Size:":
            size = int(head[1]) * KiB
        elif head[0] == "Rss:":
            maps.append(Mapping(perms, path, size, int(head[1]) * KiB))
    return maps


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * KiB
    raise KeyError(f"/proc/{pid}/status has no {key}")


def own_memory_cgroup() -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return CGROUP_V1_MEMORY / path.lstrip("/")
    raise SystemExit("this process has no cgroup v1 memory controller line in /proc/self/cgroup")


class CgroupGuestVM(GuestVM):
    """The test guest, QEMU started inside ``cgroup`` (a shell joins it, then execs QEMU:
    the pid stays the same and every page QEMU allocates is charged there from the start)."""

    def __init__(self, guest_dir: Path, workdir: Path, spec: GuestSpec, cgroup: Optional[Path]):
        super().__init__(guest_dir, workdir, spec)
        self.cgroup = cgroup

    def qemu_argv(self) -> list[str]:
        argv = super().qemu_argv()
        if self.cgroup is None:
            return argv
        join = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
        return ["sh", "-c", join, str(self.cgroup), *argv]


def grow_virtio_mem(vm: GuestVM, size_mib: int, boot_kb: int) -> None:
    with QMPClient(vm.qmp_socket) as q:
        q.execute(
            "qom-set",
            {
                "path": "/machine/peripheral/vm0",
                "property": "requested-size",
                "value": size_mib * MiB,
            },
        )
        deadline = time.monotonic() + 60
        while True:
            devs = q.execute("query-memory-devices")
            size = next(d["data"]["size"] for d in devs if d["type"] == "virtio-mem")
            if size == size_mib * MiB:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"virtio-mem did not reach {size_mib} MiB (at {size // MiB})")
            time.sleep(0.1)
    vm.wait_mem(lambda m: m.total_kb >= boot_kb + size_mib * 1024, timeout=60)


def fill_guest(vm: GuestVM) -> int:
    """Pin memory in the guest until it has no more room; returns MiB pinned."""
    while True:
        room = vm.status().avail_kb // 1024 - GUEST_RESERVE_MIB
        if room < 8:
            return vm.status().held_mib
        vm.alloc(min(room, ALLOC_CHUNK_MIB))


def cg_read(cg: Path, name: str) -> int:
    return int((cg / name).read_text().split()[0])


def cg_stat(cg: Path, key: str) -> int:
    for line in (cg / "memory.stat").read_text().splitlines():
        k, _, v = line.partition(" ")
        if k == key:
            return int(v)
    return 0


def measure(case: Case, guest_dir: Path, work: Path, parent: Optional[Path]) -> Result:
    cg = None
    if parent is not None:
        cg = parent / f"kata-mem-ovh-{os.getpid()}-{case}"
        cg.mkdir()
    spec = GuestSpec(base_mib=case.boot_mib, virtio_mem_mib=case.virtio_mem_mib)
    try:
        with CgroupGuestVM(guest_dir, work / f"guest-{case}", spec, cg) as vm:
            boot_kb = vm.status().total_kb
            if case.virtio_mem_mib:
                grow_virtio_mem(vm, case.virtio_mem_mib, boot_kb)
            total_mib = vm.status().total_kb // 1024
            pinned = fill_guest(vm)
            time.sleep(1.0)
            maps = read_smaps(vm.pid)
            # Guest RAM: the anonymous rw mappings of exactly each RAM block's size (pc.ram,
            # the virtio-mem backend). The TCG buffer is the anonymous rwx one.
            ram_sizes = [case.boot_mib * MiB] + (
                [case.virtio_mem_mib * MiB] if case.virtio_mem_mib else []
            )
            ram: list[Mapping] = []
            for want in ram_sizes:
                found = [
                    m
                    for m in maps
                    if m.path == "" and m.perms == "rw-p" and m.size == want
                    if not any(m is r for r in ram)
                ]
                if not found:
                    raise SystemExit(
                        f"case {case}: no anonymous rw-p mapping of {want // MiB} MiB "
                        "(guest RAM) in /proc/PID/smaps"
                    )
                ram.append(max(found, key=lambda m: m.rss))
            tcg = [m for m in maps if m.path == "" and m.perms == "rwxp"]
            tcg_map = max(tcg, key=lambda m: m.size) if tcg else Mapping("", "", 0, 0)
            file_rss = sum(m.rss for m in maps if m.path.startswith("/"))
            anon_rss = sum(m.rss for m in maps if not m.path.startswith("/"))
            ram_rss = sum(m.rss for m in ram)
            return Result(
                case=case,
                guest_total_mib=total_mib,
                pinned_mib=pinned,
                ram_rss=ram_rss,
                tcg_rss=tcg_map.rss,
                tcg_size=tcg_map.size,
                file_rss=file_rss,
                other_anon_rss=anon_rss - ram_rss - tcg_map.rss,
                vm_rss=status_kib(vm.pid, "VmRSS"),
                vm_hwm=status_kib(vm.pid, "VmHWM"),
                usage=cg_read(cg, "memory.usage_in_bytes") if cg else None,
                max_usage=cg_read(cg, "memory.max_usage_in_bytes") if cg else None,
                cache=cg_stat(cg, "total_cache") if cg else None,
                kernel=cg_read(cg, "memory.kmem.usage_in_bytes") if cg else None,
            )
    finally:
        if cg is not None:
            # QEMU is gone; its leftover page-cache charges move to the parent on rmdir.
            for _ in range(50):
                try:
                    cg.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                print(f"warning: could not remove {cg}", file=sys.stderr)


def mib(n: Optional[int]) -> str:
    return "-" if n is None else str(math.ceil(n / MiB))


def overhead(r: Result, basis: str, tcg: bool) -> str:
    if basis == "cgroup" and r.max_usage is None:
        return "-"
    return mib(r.overhead(basis, tcg))


def fit(points: list[tuple[int, int]]) -> tuple[int, int]:
    """(fixed, per_gib) in MiB: least-squares slope rounded up, then the smallest integer
    intercept that puts every point on or under the line."""
    if len({g for g, _ in points}) < 2:
        return max(o for _, o in points), 0
    n = len(points)
    mx = sum(g for g, _ in points) / n
    my = sum(o for _, o in points) / n
    sxx = sum((g - mx) ** 2 for g, _ in points)
    slope = sum((g - mx) * (o - my) for g, o in points) / sxx  # MiB per MiB of guest
    per_gib = max(0, math.ceil(slope * 1024))
    fixed = max(math.ceil(o - per_gib * g / 1024) for g, o in points)
    return fixed, per_gib


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases",
        type=lambda s: [Case.parse(c) for c in s.split(",") if c],
        default=[Case(512, 0), Case(1024, 0), Case(2048, 0), Case(512, 1536)],
        help="comma-separated BOOT[+VIRTIO_MEM] sizes in MiB (default 512,1024,2048,512+1536)",
    )
    parser.add_argument("--no-cgroup", action="store_true", help="read RSS only (no root needed)")
    args = parser.parse_args()
    guest_dir = Path(os.environ.get("KATA_MEM_GUEST_DIR") or ROOT / ".cache" / "guest")
    parent = None if args.no_cgroup else own_memory_cgroup()
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="kata-mem-ovh-") as tmp:
        for case in args.cases:
            results.append(measure(case, guest_dir, Path(tmp), parent))
            print(f"measured {case}", file=sys.stderr)

    tcg_size = max(r.tcg_size for r in results)
    print(
        f"QEMU TCG, test guest filled by pinning tmpfs; MiB; TCG buffer mapping {mib(tcg_size)} MiB\n"
    )
    print(
        "| guest MiB (boot+virtio-mem) | guest MemTotal | pinned | guest RAM RSS | "
        "cgroup peak | cgroup now | page cache | kmem | VmHWM | TCG buf RSS | "
        "QEMU file RSS | QEMU other anon | overhead | w/o TCG buf | w/o TCG buf, RSS basis |"
    )
    print("|" + " --- |" * 15)
    for r in results:
        print(
            f"| {r.case} | {r.guest_total_mib} | {r.pinned_mib} | {mib(r.ram_rss)} | "
            f"{mib(r.max_usage)} | {mib(r.usage)} | {mib(r.cache)} | {mib(r.kernel)} | "
            f"{mib(r.vm_hwm)} | {mib(r.tcg_rss)} | {mib(r.file_rss)} | {mib(r.other_anon_rss)} | "
            f"{overhead(r, 'cgroup', True)} | {overhead(r, 'cgroup', False)} | "
            f"{overhead(r, 'rss', False)} |"
        )
    print()
    fits = [("rss", False, "VmHWM - guest RAM RSS - TCG buffer")]
    if parent is not None:
        fits[:0] = [
            ("cgroup", False, "cgroup peak - guest RAM RSS - TCG buffer"),
            ("cgroup", True, "cgroup peak - guest RAM RSS (TCG buffer as touched here)"),
        ]
    for basis, tcg, label in fits:
        points = [(r.case.guest_mib, math.ceil(r.overhead(basis, tcg) / MiB)) for r in results]
        fixed, per_gib = fit(points)
        print(f"fit, {label}: vmm_overhead_mib = {fixed}, vmm_overhead_per_gib_mib = {per_gib}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
