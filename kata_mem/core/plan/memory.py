"""The memory plan (:func:`plan_memory`): one target, from what the sizing model asks for
down through every bound in turn, each clamp recorded with its cause, then rounded to
whole blocks and turned into steps. The stages, in the order the plan runs them:

1. what the sizing model asks for (:func:`sized`);
2. the memory maximum, raised where Kata raises it (:func:`maximum`), and the target
   clamped to it (:func:`clamp_to_maximum`);
3. the host side's bounds on a grow (:func:`~kata_mem.core.plan.guards.hold_to_guards`,
   :func:`~kata_mem.core.plan.guards.hold_to_pod_limit`), then the guest's own ceiling
   (:func:`hold_to_guest`);
4. whole blocks, never past the lowest bound above the target (:func:`whole_blocks`);
5. the steps of the VM's mechanism (:func:`~kata_mem.core.plan.steps.steps_to`).

runtime-rs sizes the same memory in src/runtime-rs/crates/resource/src/cpu_mem/mem.rs
(``MemResource::update_mem_resources``: ``default_memory`` + the containers' limits).
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from kata_mem.core.guestmem import ceiling_at, formula, guest_policy
from kata_mem.core.model import (
    KATA_VIRTIO_MEM_ID,
    Clamp,
    Demand,
    Guards,
    GuestCeiling,
    GuestPolicy,
    HostFacts,
    MaxRaise,
    Mechanism,
    MemoryCause,
    MemoryPlan,
    Note,
    SizingConfig,
    VmState,
    Workload,
)
from kata_mem.core.plan.geometry import (
    block_origin,
    block_size,
    boot_memory,
    dimm_slots,
    effective_host_memory,
    host_ceiling,
    max_memory,
    mechanism,
)
from kata_mem.core.plan.guards import (
    Upper,
    guard_notes,
    hold_to_guards,
    hold_to_pod_limit,
    host_notes,
    vmm_overhead,
)
from kata_mem.core.plan.steps import ClampFn, stage_cap, steps_to
from kata_mem.core.plan.workload import pod_overhead, static_size
from kata_mem.core.units import MiB, align_down, align_up, fmt_bytes, fmt_requested


def plan_memory(
    cfg: SizingConfig,
    host: HostFacts,
    workload: Workload,
    need: Demand,
    vm: VmState,
    guards: Guards,
    guest_available: Optional[int] = None,
) -> tuple[MemoryPlan, list[Note]]:
    """The memory plan for ``workload`` (whose demand is ``need``) on ``vm``, and its
    notes, the clamps' last; ``guest_available`` lowers the guest's own ceiling."""
    mech = mechanism(cfg)
    block = block_size(cfg, host, vm)
    base = vm.base
    now = vm.total  # the VM's guest memory, read once (a sum over its devices)
    clamps: list[Clamp] = []

    def clamp(cause: MemoryCause, limit: int, detail: str) -> None:
        clamps.append(Clamp(cause, limit, detail))

    # What the sizing model asks for, and what the plan says first of the host side's
    # reading and of the VM as Kata boots it.
    requested, notes = sized(cfg, host, workload, need)
    notes += guard_notes(guards)
    notes += _boot_notes(cfg, host, mech, base)
    # Each bound in turn lowers the target, and the upper bound whole blocks stop at.
    top, said = maximum(cfg, host, base, requested)
    notes += said
    target = clamp_to_maximum(requested, top, clamp)
    upper = Upper(top.ceiling, "the maximum")
    target, upper = hold_to_guards(cfg, vm, guards, target, upper, clamp)
    target, upper = hold_to_pod_limit(cfg, vm, guards, target, upper, clamp)
    policy = guest_policy(cfg.kernel_params, cfg.settings, mech)
    guest, target, upper = hold_to_guest(
        cfg, host, vm, policy, guest_available, target, upper, clamp
    )

    # A VM never goes below its boot memory: a target below it is kept as the target the
    # plan could not reach (``aligned``), and the VM stays at what it booted with.
    below_base = target < base
    if below_base:
        notes.append(_below_boot_note(cfg, target, base))
    unreached = target
    target = whole_blocks(mech, vm, target, block, upper, clamp)
    aligned_target = unreached if below_base else target

    # The steps of the VM's mechanism, each within what the guest can describe then.
    notes += _left_alone(mech, vm)
    cap = None if guest is None else stage_cap(cfg, host, base, policy, block, now, guest)
    steps, reached = steps_to(cfg, mech, vm, target, block, clamp, cap)
    if steps and target < now:
        notes.append(
            Note(
                "shrink_planned",
                "shrink planned: each step runs only after the guest-usage safety check",
            )
        )
    notes += host_notes(cfg, guards, now, reached)
    overhead, overhead_origin = pod_overhead(cfg, workload)
    notes.extend(Note("memory_clamp", c.detail) for c in clamps)
    return (
        MemoryPlan(
            host=effective_host_memory(host)[0],
            configured_max=cfg.default_maxmemory,
            max=top.ceiling,
            base=base,
            requested=requested,
            aligned=aligned_target,
            target=reached,
            current=now,
            mechanism=mech,
            block=block,
            clamps=tuple(clamps),
            steps=steps,
            sizing=cfg.settings.sizing,
            pod_overhead=overhead,
            pod_overhead_origin=overhead_origin,
            host_cgroup=guards.cgroup,
            host_cgroup_unseen=guards.unseen,
            vmm_overhead=None if guards.cgroup is None else vmm_overhead(cfg, reached),
            node=guards.node,
            workload=need,
            guest=guest,
            guest_policy=policy,
            static_sizing=cfg.static_sandbox_resource_mgmt,
            max_cause=top.limit_cause,
            max_raised=top.raised,
            max_limit=top.limit,
        ),
        notes,
    )


def sized(
    cfg: SizingConfig, host: HostFacts, workload: Workload, need: Demand
) -> tuple[int, list[Note]]:
    """The guest memory the sizing model asks for (docs, "Sizing models").

    ``kata``: ``default_memory`` + limits (Kata). ``pod-overhead``: the pod overhead
    + limits, what the scheduler reserved (kata-containers PR #12735). ``pod-limit``:
    the limits alone, the overhead paying for the host side (microsoft/kata-containers
    PR #281); without limits, ``default_memory`` as Kata. The boot memory is a floor
    in every model: a VM never has less than it booted with.

    With ``static_sandbox_resource_mgmt``, Kata's static size
    (:func:`~kata_mem.core.plan.workload.static_size`), whatever the model: Kata boots the
    VM at it, and a model that sized it otherwise would resize every sandbox away from its
    boot size.
    """
    work_mem = need.total_memory
    notes: list[Note] = []
    static = static_size(cfg, need)
    if static is not None:
        if cfg.settings.sizing != "kata":
            notes.append(
                Note(
                    "sizing",
                    f"sizing {cfg.settings.sizing} does not apply with "
                    "static_sandbox_resource_mgmt: the VM is sized as Kata boots it",
                )
            )
        return static, notes
    model = cfg.settings.sizing
    overhead, _ = pod_overhead(cfg, workload)
    if model == "pod-overhead" and overhead is None:
        notes.append(
            Note(
                "sizing",
                "sizing pod-overhead: no pod overhead known (Pod spec.overhead.memory, the "
                "kata-mem.io/pod-overhead-memory annotation, [kata_mem] pod_overhead_mib): "
                "sized as kata (default_memory + limits)",
            )
        )
        model = "kata"
    if model == "kata":
        wanted = cfg.default_memory + work_mem
    elif model == "pod-overhead":
        assert overhead is not None
        wanted = overhead + work_mem
    else:
        wanted = work_mem if work_mem > 0 else cfg.default_memory
    return max(wanted, boot_memory(cfg, host)), notes


def _boot_notes(cfg: SizingConfig, host: HostFacts, mech: Mechanism, base: int) -> list[Note]:
    """What the VM as Kata boots it means for the plan: boot memory lowered to the host's,
    DIMM slots the VM does not have, a VM Kata sized at boot."""
    notes: list[Note] = []
    host_mem = effective_host_memory(host)[0]
    if cfg.default_memory > host_mem:
        notes.append(
            Note(
                "boot_memory",
                f"default_memory {fmt_bytes(cfg.default_memory)} is above the host's memory "
                f"{fmt_bytes(host_mem)}: a VM boots with at most {fmt_bytes(host_mem)}, as "
                "runtime-rs lowers it (the Go runtime would ask QEMU for the full size)",
            )
        )
    slots = dimm_slots(cfg, host)
    if mech == "pc-dimm" and host.arch == "s390x":
        notes.append(
            Note(
                "memory_slots",
                "s390x has no DIMMs: Kata hotplugs memory there only with enable_virtio_mem "
                "(qemu.go hotplugMemory: s390xVirtioMemRequiredErr), so the VM keeps its boot "
                "memory",
            )
        )
    elif mech == "pc-dimm" and slots != cfg.memory_slots:
        notes.append(
            Note(
                "memory_slots",
                f"memory_slots {cfg.memory_slots} gives QEMU {slots} DIMM slots: the Go runtime "
                "hands it to QEMU as a uint8 (qemu.go memoryTopology)"
                + (", and with none QEMU refuses every DIMM" if slots == 0 else ""),
            )
        )
    if cfg.static_sandbox_resource_mgmt:
        notes.append(
            Note(
                "static_sizing",
                f"static_sandbox_resource_mgmt: Kata sized the VM at boot ({fmt_bytes(base)}) "
                "and never resizes it; kata-mem resizes it to the size Kata boots this "
                f"workload with, through its hotplug region ({mech})",
            )
        )
    return notes


class Maximum(NamedTuple):
    """The memory maximum a plan's target is clamped to, and what set it."""

    #: The maximum, and the cause a clamp to it names.
    ceiling: int
    cause: MemoryCause
    #: The maximum ``default_maxmemory``, the host or the hugepage pool set, before a raise.
    limit: int
    limit_cause: MemoryCause
    #: What raised the maximum above ``limit``: the boot size, or the boot memory.
    raised: Optional[MaxRaise]
    #: The maximum the boot memory is above, when the VM keeps its boot memory instead.
    below: Optional[int]


def maximum(
    cfg: SizingConfig, host: HostFacts, base: int, requested: int
) -> tuple[Maximum, list[Note]]:
    """The memory maximum (:func:`~kata_mem.core.plan.geometry.max_memory`), raised to the
    size Kata boots the workload with under static sizing, and to the boot memory when the
    VM booted above it; with what the plan says of each raise."""
    notes: list[Note] = []
    host_mem, host_cause = effective_host_memory(host)
    ceiling, ceiling_cause = max_memory(cfg, host)
    limit, limit_cause = ceiling, ceiling_cause
    raised_to: Optional[MaxRaise] = None
    top, top_cause = host_ceiling(cfg, host)
    wanted = max(align_up(requested, MiB), base) if cfg.static_sandbox_resource_mgmt else 0
    if wanted > ceiling and ceiling < top:
        # Kata raises default_maxmemory to the boot size (runtime-rs
        # InitialSizeManager::setup_config: default_maxmemory.max(default_memory)), and
        # kata-mem follows runtime-rs, never above the host (the Go runtime boots the full
        # size too, but keeps QEMU's maxmem at default_maxmemory + memory_offset + 1024 MiB,
        # so QEMU refuses to start above that). Raised to the size Kata would boot the
        # workload with now, the maximum is no longer what bounds a resize after boot:
        # QEMU's maxmem, fixed when the VM booted (runtime-rs: the maximum raised to the
        # boot size then; with default_maxmemory 0, Kata's default, the host's memory), is,
        # through the device space it leaves (cause device_space).
        raised = min(wanted, top)  # whole MiB, as Kata's static sizes are
        what = "the boot size" if align_up(requested, MiB) >= base else "the VM's boot memory"
        notes.append(
            Note(
                "static_sizing",
                f"static_sandbox_resource_mgmt: the maximum is raised from "
                f"{fmt_bytes(ceiling)} ({ceiling_cause}) to {what} {fmt_bytes(raised)}, as "
                "runtime-rs does",
            )
        )
        ceiling, ceiling_cause, raised_to = raised, top_cause, "boot_size"
    below: Optional[int] = None
    if base > ceiling:
        notes.append(
            Note(
                "boot_memory",
                f"boot memory {fmt_bytes(base)} is above the memory maximum "
                f"{fmt_bytes(ceiling)}: the sandbox keeps its boot memory and nothing is "
                "hotplugged",
            )
        )
        below, ceiling, raised_to = ceiling, base, "boot_memory"
        if cfg.default_memory > host_mem and base >= host_mem:
            # The boot memory was lowered to the host's, which then bounds the target:
            # default_maxmemory, below it, is not what the target was clamped to.
            below, ceiling_cause = None, host_cause
    return Maximum(ceiling, ceiling_cause, limit, limit_cause, raised_to, below), notes


def clamp_to_maximum(requested: int, top: Maximum, clamp: ClampFn) -> int:
    """``requested`` within the maximum, the clamp said by what set it."""
    target = requested
    if target > top.ceiling:
        said = _cause_text(top.cause, requested, top.ceiling)
        if top.below is not None:
            # Clamped by the cause, but to the boot memory: "clamped to 2048 MiB by the
            # hugepage pool" of a pool of 1024 MiB would not add up.
            said = (
                f"requested {fmt_requested(requested)} clamped to the boot memory "
                f"{fmt_bytes(top.ceiling)}, which is above {_CAUSE_WHY[top.cause]} "
                f"{fmt_bytes(top.below)}"
            )
        clamp(top.cause, top.ceiling, said)
        target = top.ceiling
    return target


def hold_to_guest(
    cfg: SizingConfig,
    host: HostFacts,
    vm: VmState,
    policy: GuestPolicy,
    guest_available: Optional[int],
    target: int,
    upper: Upper,
    clamp: ClampFn,
) -> tuple[Optional[GuestCeiling], int, Upper]:
    """The guest's own ceiling on a grow to ``target`` (:mod:`kata_mem.core.guestmem`;
    None where the guest pays for what is added, memmap_on_memory, or nothing grows), the
    target within it where hot-added memory is onlined movable, and the new upper bound."""
    base, now = vm.base, vm.total
    if target <= now or policy.memmap_on_memory:
        return None, target, upper
    guest = ceiling_at(policy, cfg.settings, host.arch, base, now, guest_available)
    if policy.onlining == "movable":
        # Added memory pays for nothing: the whole grow is described from the boot memory.
        bound = max(guest.limit, now)
        if target > bound:
            clamp("guest_memmap", bound, _guest_text(guest, target, bound))
            target = bound
        if bound < upper.limit:
            upper = Upper(bound, "the guest's memmap ceiling")
    return guest, target, upper


def whole_blocks(
    mech: Mechanism, vm: VmState, target: int, block: int, upper: Upper, clamp: ClampFn
) -> int:
    """``target`` with what is added rounded up to whole blocks, counted from what the plan
    cannot change in blocks (:func:`~kata_mem.core.plan.geometry.block_origin`); rounded
    down instead where up would cross ``upper``."""
    origin = block_origin(mech, vm, target)
    want = max(target - origin, 0)
    aligned = align_up(want, block)
    if origin + aligned > upper.limit:
        aligned = align_down(want, block)
        if aligned < want:
            clamp(
                "alignment",
                origin + aligned,
                f"rounded down to {fmt_bytes(origin + aligned)}: the next {fmt_bytes(block)} "
                f"block would cross {upper.what} {fmt_bytes(upper.limit)}",
            )
    return origin + aligned


def _below_boot_note(cfg: SizingConfig, target: int, base: int) -> Note:
    return Note(
        "boot_memory",
        f"the target {fmt_requested(target)} is below the VM's boot memory "
        f"{fmt_bytes(base)}: "
        + (
            "Kata sized the VM at boot (static_sandbox_resource_mgmt), and boot memory "
            "cannot be given back"
            if cfg.static_sandbox_resource_mgmt
            else "boot memory cannot be given back"
        )
        + f"; the VM keeps at least {fmt_bytes(base)}",
    )


def _left_alone(mech: Mechanism, vm: VmState) -> list[Note]:
    """The virtio-mem devices a plan does not resize: all but the sandbox's."""
    dev = vm.virtio_mem
    others = [d.id for d in vm.virtio_mems if dev is not None and d is not dev]
    if mech != "virtio-mem" or not others:
        return []
    return [
        Note(
            "left_alone",
            f"left alone: virtio-mem {', '.join(others)}: kata-mem resizes only the sandbox's "
            f"{dev.id if dev else ''} (Kata's {KATA_VIRTIO_MEM_ID}), and counts the others' "
            "memory as it is",
        )
    ]


#: A maximum's cause, in words.
_CAUSE_WHY: dict[MemoryCause, str] = {
    "default_maxmemory": "default_maxmemory",
    "host_memtotal": "the host's MemTotal",
    "host_cgroup": "the host memory cgroup limit",
    "hugepages": "the hugepage pool",
}


def _cause_text(cause: MemoryCause, requested: int, limit: int) -> str:
    return (
        f"requested {fmt_requested(requested)} clamped to {fmt_bytes(limit)} by {_CAUSE_WHY[cause]}"
    )


def _guest_text(guest: GuestCeiling, target: int, bound: int) -> str:
    return (
        f"grow to {fmt_requested(target)} clamped to {fmt_bytes(bound)} by what the guest "
        f"kernel can describe: {formula(guest)}; raise default_memory, or online hot-added "
        "memory to a kernel zone (memhp_default_state=online_kernel in kernel_params, or "
        '[kata_mem] guest_onlining = "kernel"), or use memmap_on_memory (pc-dimm)'
    )
