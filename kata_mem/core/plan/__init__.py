"""The sizing planner: pure functions from configuration, host, workload and VM state to a
:class:`~kata_mem.core.model.Plan`, :func:`plan` their one front.

No I/O, no clock, no environment. ``preview`` prints exactly the plan that ``apply``
carries out. Each rule names the Kata behaviour it mirrors; where kata-mem deliberately
differs, the docstring says why (docs, "Compared with Kata").

A plan runs in stages, a module each, as Kata's runtime-rs cuts the same ground in
src/runtime-rs/crates/resource/src/cpu_mem/ (``initial_size.rs``, ``mem.rs``, ``cpu.rs``):

- :mod:`~kata_mem.core.plan.workload`: what the workload needs (its peak, under pod-level
  limits and the CRI annotations) and the size Kata boots a VM with for it;
- :mod:`~kata_mem.core.plan.geometry`: the VM the configuration boots on the host: its
  memory maximum, boot memory, mechanism and block, DIMM slots, QEMU's ``maxmem``;
- :mod:`~kata_mem.core.plan.memory`: the memory plan, one target through every bound in
  turn, each clamp with its cause, with the host side's bounds from
  :mod:`~kata_mem.core.plan.guards` and the steps of each mechanism from
  :mod:`~kata_mem.core.plan.steps`;
- :mod:`~kata_mem.core.plan.vcpus`: the vCPUs.

What has a life of its own is out of the planner: the guest's own ceiling arithmetic
(:mod:`kata_mem.core.guestmem`), shrink safety (:mod:`kata_mem.core.safety`), outcomes
(:mod:`kata_mem.core.outcomes`) and pod resizes (:mod:`kata_mem.core.podresize`).
"""

from __future__ import annotations

from typing import Optional

from kata_mem.core.model import Guards, HostFacts, Note, Plan, SizingConfig, VmState, Workload
from kata_mem.core.plan.geometry import booted_vm
from kata_mem.core.plan.memory import plan_memory
from kata_mem.core.plan.vcpus import plan_vcpus
from kata_mem.core.plan.workload import demand

#: No host-side guard (frozen: one is shared).
_NO_GUARDS = Guards()


def plan(
    cfg: SizingConfig,
    host: HostFacts,
    workload: Workload,
    vm: Optional[VmState] = None,
    guards: Optional[Guards] = None,
    guest_available: Optional[int] = None,
) -> Plan:
    """Plan the sandbox's memory and vCPUs.

    ``vm`` is the observed VM (``None``: a freshly booted VM as Kata boots it for
    ``workload``);
    ``guards`` what the host side says (its cgroup, the node's total), read just
    before; ``guest_available`` the guest's MemAvailable from a fresh reading (``apply``),
    which lowers the guest's own ceiling (:mod:`kata_mem.core.guestmem`). Never raises
    for large limits: the target is clamped and every clamp is recorded with its cause.
    """
    need, warnings = demand(cfg, workload)  # once: memory and vCPUs size the same workload
    vm = vm if vm is not None else booted_vm(cfg, host, None, need)
    mem_plan, mem_notes = plan_memory(
        cfg, host, workload, need, vm, guards or _NO_GUARDS, guest_available
    )
    vcpus, vcpu_notes = plan_vcpus(cfg, host, need)
    warnings += mem_notes
    warnings += vcpu_notes
    warnings += [Note("vcpu_clamp", c.detail) for c in vcpus.clamps]
    if workload.sizing is not None:
        warnings = [*workload.sizing.notes, *warnings]
    return Plan(memory=mem_plan, vcpus=vcpus, notes=tuple(warnings))
