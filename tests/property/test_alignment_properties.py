"""Every plan moves memory in whole blocks of its mechanism, from any current size
kata-mem accepts, and kata-mem accepts exactly the current sizes a guest can have."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from kata_mem.core.model import HostFacts, SizingConfig, Workload
from kata_mem.core.planner import (
    assumed_vm,
    block_size,
    boot_memory,
    current_problem,
    max_memory,
    plan,
)
from kata_mem.core.units import MiB
from tests.strategies import configs, hosts, workloads


@st.composite
def setups(draw: st.DrawFn) -> tuple[SizingConfig, HostFacts]:
    cfg = draw(configs(mechanism=draw(st.sampled_from(["pc-dimm", "virtio-mem"]))))
    host = draw(hosts)
    if draw(st.booleans()):
        cfg = dataclasses.replace(cfg, enable_hugepages=True)
        host = dataclasses.replace(
            host,
            hugepage_size=draw(st.sampled_from([2 * MiB, 1024 * MiB])),
            hugepages_total=draw(st.integers(min_value=0, max_value=1 << 14)),
        )
    return cfg, host


@given(setups(), workloads, st.data())
def test_steps_are_whole_blocks_from_any_accepted_current(
    setup: tuple[SizingConfig, HostFacts], req: Workload, data: st.DataObject
) -> None:
    cfg, host = setup
    base = boot_memory(cfg, host)
    block = block_size(cfg, host)
    room = max(max_memory(cfg, host)[0] - base, 0) // block
    current = base + block * data.draw(st.integers(min_value=0, max_value=room))
    assert current_problem(cfg, host, current) is None
    m = plan(cfg, host, req, assumed_vm(cfg, host, current)).memory
    assert m.block == block
    assert (m.target - m.base) % block == 0
    for step in m.steps:
        assert step.size % block == 0 and step.delta % block == 0
        assert (step.total_after - m.base) % block == 0


@given(setups(), st.integers(min_value=1, max_value=1 << 40))
def test_a_current_size_off_the_blocks_is_refused(
    setup: tuple[SizingConfig, HostFacts], offset: int
) -> None:
    cfg, host = setup
    block = block_size(cfg, host)
    current = boot_memory(cfg, host) + offset
    problem = current_problem(cfg, host, current)
    if offset % block or current > max(max_memory(cfg, host)[0], boot_memory(cfg, host)):
        assert problem is not None
    else:
        assert problem is None
