"""The guest's own ceiling holds for every plan: no grow step adds more memory
than the guest's kernel-zone memory can describe at that step, and with movable onlining
no plan's target is above what the boot memory can describe.

The bound is computed here from the kernel's facts, independently of
kata_mem/core/guestmem.py: a 64-byte struct page per base page (4 KiB, 64 KiB on
ppc64le), paid from 3/4 of the kernel-zone memory (Kata's own assumption, sandbox.go
``acpiMemoryHotplugFactor``) or a fresh MemAvailable reading, whichever is less, less
the memmap already paid for the plugged memory and a headroom of at least
``headroom_min`` and ``headroom_percent`` of the kernel-zone memory.
"""

from __future__ import annotations

from typing import Optional

from hypothesis import given
from hypothesis import strategies as st

from kata_mem.core.frozen import replace
from kata_mem.core.model import HostFacts, MemoryPlan, SizingConfig, Workload
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import assumed_vm
from kata_mem.core.units import MiB
from tests.strategies import configs, hosts, workloads

KERNEL_PARAMS = (
    "",
    "memhp_default_state=online_movable",
    "memhp_default_state=online_kernel",
    "memhp_default_state=online memory_hotplug.online_policy=auto-movable",
    "memory_hotplug.memmap_on_memory=1",
    "movable_node",
)


@st.composite
def guest_configs(draw: st.DrawFn) -> SizingConfig:
    cfg = draw(configs())
    settings = replace(
        cfg.settings,
        guest_onlining=draw(st.sampled_from([None, "movable", "kernel"])),
        guest_memmap_on_memory=draw(st.booleans()),
        headroom_min=draw(st.sampled_from([0, 64, 128, 512])) * MiB,
        headroom_percent=draw(st.sampled_from([0, 5, 10, 50])),
    )
    return replace(cfg, settings=settings, kernel_params=draw(st.sampled_from(KERNEL_PARAMS)))


readings = st.none() | st.integers(min_value=0, max_value=1 << 16).map(lambda n: n * MiB)


def _movable(cfg: SizingConfig) -> bool:
    words = cfg.kernel_params.split()
    if "memhp_default_state=online_movable" in words:
        return True
    if "memhp_default_state=online_kernel" in words:
        return False
    if "memory_hotplug.online_policy=auto-movable" in words or "movable_node" in words:
        return True
    return cfg.settings.guest_onlining == "movable"


def _memmap_counted(cfg: SizingConfig) -> bool:
    return cfg.settings.guest_memmap_on_memory and not cfg.enable_virtio_mem


def addable(cfg: SizingConfig, arch: str, base: int, total: int, reading: Optional[int]) -> int:
    """What the guest can describe on top of ``total``, from the facts alone."""
    page = 64 * 1024 if arch == "ppc64le" else 4096
    kernel = base if _movable(cfg) else total
    plugged_pages = -(-(total - base) // page)
    available = kernel * 3 // 4 - plugged_pages * 64
    if reading is not None:
        available = min(available, reading)
    headroom = max(cfg.settings.headroom_min, kernel * cfg.settings.headroom_percent // 100)
    return max(available - headroom, 0) // 64 * page


def _from_boot(
    cfg: SizingConfig, host: HostFacts, req: Workload, reading: Optional[int] = None
) -> MemoryPlan:
    """The plan for ``req`` of a VM booted without a workload: with static sizing, a
    resize after boot (booted for ``req`` itself, a static VM would be at its target)."""
    return plan(cfg, host, req, assumed_vm(cfg, host, None, Workload()), None, reading).memory


@given(guest_configs(), hosts, workloads, readings)
def test_no_step_adds_more_than_the_guest_can_describe(
    cfg: SizingConfig, host: HostFacts, req: Workload, reading: Optional[int]
) -> None:
    m = _from_boot(cfg, host, req, reading)
    if _memmap_counted(cfg):
        return
    vm = assumed_vm(cfg, host, None, Workload())
    total = m.current
    for i, step in enumerate(m.steps):
        if step.delta <= 0:
            return
        assert step.delta <= addable(cfg, host.arch, vm.base, total, reading if i == 0 else None), (
            i,
            step,
            total,
        )
        total = step.total_after


@given(guest_configs(), hosts, workloads, readings)
def test_with_movable_onlining_no_target_above_what_the_boot_memory_describes(
    cfg: SizingConfig, host: HostFacts, req: Workload, reading: Optional[int]
) -> None:
    m = _from_boot(cfg, host, req, reading)
    if _memmap_counted(cfg) or not _movable(cfg):
        return
    if m.target > m.current:
        assert m.target <= m.current + addable(cfg, host.arch, m.base, m.current, reading)
        assert m.guest is not None and m.target <= max(m.guest.limit, m.current)


@given(guest_configs(), hosts, workloads)
def test_kernel_onlining_stages_to_the_target(
    cfg: SizingConfig, host: HostFacts, req: Workload
) -> None:
    """Onlined to a kernel zone, each step's memory pays for the next: once the first
    block fits, the grow is never stopped by the guest's ceiling (slots, device space and
    the host still may)."""
    m = _from_boot(cfg, host, req)
    if _memmap_counted(cfg) or _movable(cfg):
        return
    if cfg.settings.headroom_percent > 50 or m.target <= m.current:
        return
    if addable(cfg, host.arch, m.base, m.current, None) >= m.block:
        assert "guest_memmap" not in [c.cause for c in m.clamps], m.clamps
