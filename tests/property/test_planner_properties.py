"""Properties of the planner that hold for every configuration, host and workload."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from kata_mem.core.frozen import replace
from kata_mem.core.model import MemoryDevice, SizingConfig, VmState, Workload
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import max_memory
from kata_mem.core.plan.steps import ACPI_HOTPLUG_FACTOR
from kata_mem.core.plan.workload import demand, runtime_rs_static, static_size
from kata_mem.core.request import MIN_HOST_MEMORY
from kata_mem.core.units import MiB
from kata_mem.edges.host import probe_host
from kata_mem.interfaces.render import plan_json
from tests.strategies import configs, containers, hosts, workloads


@given(configs(), hosts, workloads)
def test_target_within_base_and_max(cfg: SizingConfig, host: object, req: Workload) -> None:
    p = plan(cfg, host, req)  # type: ignore[arg-type]
    m = p.memory
    if cfg.static_sandbox_resource_mgmt:
        # Kata boots the VM at the workload's static size, never above the host.
        boot = static_size(cfg, demand(cfg, req)[0])
        assert boot is not None
        assert m.base == min(boot, host.memory)  # type: ignore[attr-defined]
        assert m.target == m.base and m.steps == ()
    else:
        assert m.base == min(cfg.default_memory, host.memory)  # type: ignore[attr-defined]
    assert m.base <= m.target <= host.memory  # type: ignore[attr-defined]
    ceiling, _ = max_memory(cfg, host)  # type: ignore[arg-type]
    if m.base <= ceiling and not cfg.static_sandbox_resource_mgmt:
        assert m.target <= ceiling
    assert 1 <= p.vcpus.target <= p.vcpus.max or p.vcpus.max == 0


@given(configs(), st.integers(min_value=MIN_HOST_MEMORY, max_value=1 << 45), workloads)
def test_a_host_given_in_bytes_plans_within_its_max_as_shown(
    cfg: SizingConfig, memory: int, req: Workload
) -> None:
    """--host-memory and host.memory_bytes are floored to MiB as MemTotal is: the plan's
    sizes are whole MiB, and its target never shows above its max (2000.5Mi
    gave max 2000, target 2001)."""
    host = probe_host(memory=memory, cpus=4, arch="amd64", hugepages=(1024, 2 * MiB))
    assert host.memory == memory - memory % MiB
    p = plan(cfg, host, req)
    doc = plan_json(p, cfg)["memory"]
    assert doc["target_mib"] <= doc["max_mib"] and doc["base_mib"] <= doc["host_mib"]
    assert all(size % MiB == 0 for size in (p.memory.max, p.memory.base, p.memory.target))


@given(configs(), hosts, workloads)
def test_hotplugged_amount_is_block_aligned(cfg: SizingConfig, host: object, req: Workload) -> None:
    m = plan(cfg, host, req).memory  # type: ignore[arg-type]
    assert (m.target - m.base) % m.block == 0
    for step in m.steps:
        assert step.size % m.block == 0


@given(configs(), hosts, workloads, containers)
def test_monotone_in_the_limits(
    cfg: SizingConfig, host: object, req: Workload, extra: object
) -> None:
    need = demand(cfg, req)[0]
    if runtime_rs_static(cfg, need) is not None and not (need.total_memory or need.cpu):
        # runtime-rs boots a sandbox without any workload at default_memory, and one with
        # a CPU limit alone at overhead_memory, which may be less (InitialSizeManager::
        # setup_config; rstest cpu_only_limit): monotone only from the first workload on.
        return
    before = plan(cfg, host, req).memory.target  # type: ignore[arg-type]
    more = Workload((*req.containers, extra))  # type: ignore[arg-type]
    assert plan(cfg, host, more).memory.target >= before  # type: ignore[arg-type]


@given(configs(mechanism="pc-dimm"), hosts, workloads)
def test_dimm_steps_respect_48x_slots_and_sum_to_delta(
    cfg: SizingConfig, host: object, req: Workload
) -> None:
    m = plan(cfg, host, req).memory  # type: ignore[arg-type]
    total = m.current
    for step in m.steps:
        assert step.action == "plug_dimm"
        assert step.size <= max(ACPI_HOTPLUG_FACTOR * total, m.block)
        total += step.size
        assert step.total_after == total
    assert total == m.target
    assert len(m.steps) <= cfg.memory_slots


def _after(vm: VmState, cfg: SizingConfig, host: object, req: Workload) -> VmState:
    """The VM once the plan's steps are done (what a perfect hypervisor reports)."""
    devices = list(vm.devices)
    for step in plan(cfg, host, req, vm).memory.steps:  # type: ignore[arg-type]
        if step.action == "plug_dimm":
            devices.append(MemoryDevice(step.device, "dimm", step.size, slot=len(devices)))
        elif step.action == "unplug_dimm":
            devices = [d for d in devices if d.id != step.device]
        else:
            devices = [
                replace(d, size=step.size, requested=step.size) if d.id == step.device else d
                for d in devices
            ]
    return replace(vm, devices=tuple(devices))


@given(configs(), hosts, workloads, workloads)
def test_replanning_the_reached_state_is_a_no_op(
    cfg: SizingConfig, host: object, first: Workload, second: Workload
) -> None:
    from kata_mem.core.plan.geometry import assumed_vm

    vm = assumed_vm(cfg, host)  # type: ignore[arg-type]
    vm = _after(vm, cfg, host, first)
    vm = _after(vm, cfg, host, second)  # grow or shrink from there
    again = plan(cfg, host, second, vm).memory  # type: ignore[arg-type]
    assert again.steps == ()
    assert again.target == vm.total


@given(configs(mechanism="virtio-mem"), hosts, workloads, st.integers(min_value=1, max_value=64))
def test_virtio_mem_shrink_steps_are_bounded(
    cfg: SizingConfig, host: object, req: Workload, blocks: int
) -> None:
    from kata_mem.core.plan.geometry import assumed_vm

    vm = assumed_vm(cfg, host)  # type: ignore[arg-type]
    dev = vm.virtio_mem
    assert dev is not None
    size = min(blocks * 256 * 2**20, dev.max_size)
    assume(size > 0 and size % dev.block == 0)
    vm = replace(vm, devices=(replace(dev, size=size, requested=size),))
    m = plan(cfg, host, req, vm).memory  # type: ignore[arg-type]
    bound = max(cfg.settings.shrink_step_min, size * cfg.settings.shrink_step_percent // 100)
    for step in m.steps:
        if step.delta < 0:
            assert -step.delta <= bound
            assert step.size % dev.block == 0
