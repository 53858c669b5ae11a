"""Every plan moves memory in whole blocks of its mechanism, from any current size
kata-mem accepts, and kata-mem accepts exactly the current sizes a guest can have."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kata_mem.core.frozen import replace
from kata_mem.core.model import HostFacts, MemoryDevice, SizingConfig, Workload
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import (
    assumed_vm,
    block_size,
    boot_memory,
    current_problem,
    max_memory,
)
from kata_mem.core.plan.steps import crooked_regions
from kata_mem.core.units import GiB, MiB, align_up
from tests.strategies import configs, hosts, workloads


@st.composite
def setups(draw: st.DrawFn) -> tuple[SizingConfig, HostFacts]:
    cfg = draw(configs(mechanism=draw(st.sampled_from(["pc-dimm", "virtio-mem"]))))
    host = draw(hosts)
    if draw(st.booleans()):
        cfg = replace(cfg, enable_hugepages=True)
        host = replace(
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


@given(setups(), workloads, st.data())
def test_memory_kata_mem_did_not_plug_never_makes_a_step_off_the_blocks(
    setup: tuple[SizingConfig, HostFacts], req: Workload, data: st.DataObject
) -> None:
    """Another tool's DIMM of any size, anywhere, and memory left plugged in a virtio-mem
    device: a planned DIMM is whole blocks and lands on a block, and a virtio-mem size is
    whole blocks of its device (before: ``target - total``, 184 MiB beside a 200 MiB DIMM)."""
    cfg, host = setup
    block = block_size(cfg, host)
    vm = assumed_vm(cfg, host)
    area = 4096 * MiB  # where the device-memory area starts (GiB-aligned, as on every machine)
    foreign = data.draw(st.integers(min_value=1, max_value=4096)) * MiB
    at = area + data.draw(st.integers(min_value=0, max_value=64)) * MiB
    others = [MemoryDevice("otherdimm", "dimm", foreign, slot=0, memdev="othermem", addr=at)]
    if cfg.enable_virtio_mem or data.draw(st.booleans()):
        dev_block = vm.virtio_mem.block if vm.virtio_mem else 2 * MiB
        size = dev_block * data.draw(st.integers(min_value=0, max_value=8))
        place = align_up(at + foreign, 1024 * MiB)
        dev = MemoryDevice("vm0", "virtio-mem", size, size, 64 * GiB, dev_block, addr=place)
        others.append(dev)
    vm = replace(vm, devices=tuple(others), device_space=None)
    m = plan(cfg, host, req, vm).memory
    for step in m.steps:
        unit = block if step.action == "plug_dimm" else others[-1].block
        assert step.size % unit == 0, step
    if any(s.action == "plug_dimm" for s in m.steps):
        assert crooked_regions(vm, block) == []
