"""The host-cgroup guard for every configuration, cgroup and VM: a grow never takes the
guest plus the VMM's overhead and the margin past any limit on the path, the guard never
shrinks a VM, and a cgroup without limits changes nothing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kata_mem.core.frozen import replace
from kata_mem.core.model import (
    CgroupLevel,
    Container,
    Guards,
    HostCgroup,
    HostFacts,
    SizingConfig,
    Workload,
)
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import assumed_vm, block_size, max_memory
from kata_mem.core.plan.guards import GUARD_NAMES, vmm_overhead
from kata_mem.core.units import MiB, align_down
from tests.strategies import configs, hosts, workloads

mib = st.integers(min_value=0, max_value=256).map(lambda n: n * MiB)
#: How far a limit is above the VM's size: enough, mostly, for a grow to be judged.
room_above = st.integers(min_value=512 * MiB, max_value=1 << 34)
#: What a level is charged beyond the VM's memory: often more than the VMM overhead.
beyond = st.one_of(
    st.none(), st.integers(min_value=0, max_value=1 << 30), st.integers(256 * MiB, 2 << 30)
)
paths = st.sampled_from(["/pod", "/kubepods", "/"])


@st.composite
def guarded(draw: st.DrawFn) -> tuple[SizingConfig, HostFacts, Workload, int, list[CgroupLevel]]:
    """A hotplug configuration with random guard settings, a host, a workload, the VM's
    current size (the boot memory plus a few whole blocks, at most the maximum) and the
    cgroup levels: limits in bytes (cgroup files hold bytes, not always whole MiB) near
    the VM's size, so that they often bind, charged often more than the VMM overhead."""
    cfg = draw(configs(mechanism=draw(st.sampled_from(["pc-dimm", "virtio-mem"]))))
    cfg = replace(
        cfg,
        settings=replace(
            cfg.settings,
            vmm_overhead=draw(mib),
            vmm_overhead_per_gib=draw(
                st.one_of(st.integers(0, 16), st.integers(min_value=0, max_value=1024), st.just(0))
            )
            * MiB,
            host_cgroup_margin=draw(mib),
        ),
    )
    host = draw(hosts)
    base = assumed_vm(cfg, host).base
    block = block_size(cfg, host)
    ceiling = max(max_memory(cfg, host)[0], base)
    blocks = draw(st.integers(min_value=0, max_value=max(min((ceiling - base) // block, 64), 0)))
    current = base + min(blocks * block, align_down(ceiling - base, block))
    levels = [
        CgroupLevel(
            path,
            max(current + draw(st.one_of(room_above, st.integers(-(1 << 30), 1 << 34))), 0),
            None if usage is None else current + usage,
        )
        for path, usage in draw(st.lists(st.tuples(paths, beyond), min_size=1, max_size=3))
    ]
    # Mostly one container asking for up to 16 GiB more: a grow for the guard to judge.
    grow = st.integers(min_value=0, max_value=1 << 34).map(
        lambda n: Workload((Container("c", memory_limit=n),))
    )
    return cfg, host, draw(st.one_of(grow, grow, workloads)), current, levels


@given(guarded(), st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 36)))
def test_a_grow_fits_every_limit_and_nothing_shrinks(
    case: tuple[SizingConfig, HostFacts, Workload, int, list[CgroupLevel]], usage: int | None
) -> None:
    cfg, host, req, current, lvls = case
    vm = assumed_vm(cfg, host, current)
    cgroup = HostCgroup("/pod/qemu", 2, usage, tuple(lvls))
    m = plan(cfg, host, req, vm, Guards(cgroup=cgroup)).memory
    free = plan(cfg, host, req, vm).memory
    s = cfg.settings
    assert m.target <= free.target, "the guard only ever lowers a plan"
    if m.target > vm.total:
        for lvl in lvls:
            assert m.target + vmm_overhead(cfg, m.target) + s.host_cgroup_margin <= lvl.limit
            beyond = max((lvl.usage or 0) - vm.total, 0)
            assert m.target + beyond + s.host_cgroup_margin <= lvl.limit
    else:
        # Never below what the VM has, unless the workload itself asks for less.
        assert m.target >= min(free.target, vm.total)
    if m.target < free.target:
        # Clamped by it, or rounded down below its room (a whole block would cross it).
        assert "host_cgroup" in [c.cause for c in m.clamps] or any(
            c.cause == "alignment" and GUARD_NAMES["host_cgroup"] in c.detail for c in m.clamps
        )


@given(guarded(), st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 36)))
def test_no_limit_is_the_unguarded_plan(
    case: tuple[SizingConfig, HostFacts, Workload, int, list[CgroupLevel]], usage: int | None
) -> None:
    cfg, host, req, current, _ = case
    vm = assumed_vm(cfg, host, current)
    guarded_plan = plan(cfg, host, req, vm, Guards(cgroup=HostCgroup("/pod", 2, usage)))
    free = plan(cfg, host, req, vm)
    assert guarded_plan.notes == free.notes
    assert replace(guarded_plan.memory, host_cgroup=None, vmm_overhead=None) == (free.memory)
