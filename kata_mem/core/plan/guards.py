"""The host side's bounds on a VM (docs, "Host-side guards"): the room the VMM's memory
cgroup leaves with the VMM's own overhead, the node's budget, and the new pod limit a
resize is about to set; and what a plan says of them. They bound a grow only, never
shrink a VM here (a shrink has its own safety rules), except the new pod limit, which
bounds the VM whichever way it goes. The readings themselves are
:mod:`kata_mem.orchestration.guards`'s, made just before the plan."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Optional

from kata_mem.core.model import (
    CgroupLevel,
    Guards,
    HostCgroup,
    MemoryCause,
    Note,
    SizingConfig,
    VmState,
)
from kata_mem.core.units import GiB, MiB, align_down, fmt_bytes, fmt_requested, per_gib_ceil

#: Records a clamp (the memory plan's: :func:`kata_mem.core.plan.memory.plan_memory`).
_ClampFn = Callable[[MemoryCause, int, str], None]
#: What a guard's bound is called when the alignment stops below it.
GUARD_NAMES: dict[MemoryCause, str] = {
    "host_cgroup": "the host cgroup's room",
    "host_cgroup_unseen": "what the VM has (its host cgroup unseen)",
    "node_budget": "the node budget's room",
}


class Upper(NamedTuple):
    """The lowest bound above a target, and its name: whole blocks round a target up no
    further (:func:`kata_mem.core.plan.memory.whole_blocks`)."""

    limit: int
    what: str


def vmm_overhead(cfg: SizingConfig, guest_total: int) -> int:
    """What the VMM uses on the host beyond guest RAM, by the configured model:
    a fixed part plus a part per GiB of guest memory (host page tables grow with it)."""
    s = cfg.settings
    return s.vmm_overhead + per_gib_ceil(s.vmm_overhead_per_gib, guest_total)


def cgroup_room(
    cfg: SizingConfig, cgroup: HostCgroup, current: int
) -> Optional[tuple[int, CgroupLevel]]:
    """The largest guest total the cgroup's limits allow, and the limit that binds
    (``None`` without a limit).

    At every limited level ``total + max(vmm_overhead(total), other) + margin <=
    limit``, where ``other`` is what is charged there beyond the guest memory the
    VM has now (``usage - current``): the cgroup's actual charge, when it says more
    than the overhead model (a virtiofsd, other pods under a parent), wins.
    """
    best: Optional[tuple[int, CgroupLevel]] = None
    for level in cgroup.levels:
        room = level_room(cfg, level, current)
        if best is None or room < best[0]:
            best = (room, level)
    return best


def level_room(cfg: SizingConfig, level: CgroupLevel, current: int) -> int:
    """The largest guest total one limited cgroup level allows (:func:`cgroup_room`)."""
    s = cfg.settings
    usable = level.limit - s.host_cgroup_margin
    by_model = (usable - s.vmm_overhead) * GiB // (GiB + s.vmm_overhead_per_gib)
    other = max((level.usage or 0) - current, 0)
    # Whole MiB (every block is): readable clamps, and no plan changes.
    return align_down(max(min(by_model, usable - other), 0), MiB)


def guard_notes(guards: Guards) -> list[Note]:
    """What the host side's reading says before it bounds anything: its own notes, and
    that the VMM's cgroup could not be seen or was not looked for."""
    notes = list(guards.notes)
    if guards.unseen is not None:
        notes.append(Note("host_cgroup_unseen", _unseen_text(guards)))
    elif guards.off:
        notes.append(
            Note(
                "host_cgroup",
                'host cgroup guard off (host_cgroup_guard = "off"): growth is not checked '
                "against the VMM's cgroup",
            )
        )
    return notes


def hold_to_guards(
    cfg: SizingConfig, vm: VmState, guards: Guards, target: int, upper: Upper, clamp: _ClampFn
) -> tuple[int, Upper]:
    """A grow to ``target`` held within the VMM's cgroup and the node's budget
    (:func:`guard_rooms`), and the new upper bound: neither takes the VM below what it
    has. A target within a room still rounds up to whole blocks: not past the room."""
    now = vm.total
    if target > now:
        for cause, room, detail in guard_rooms(cfg, vm, guards, target):
            bound = max(room, now)
            if target > room:
                clamp(cause, bound, detail(bound))
                target = bound
            if bound < upper.limit:
                upper = Upper(bound, GUARD_NAMES[cause])
    return target, upper


def guard_rooms(
    cfg: SizingConfig, vm: VmState, guards: Guards, target: int
) -> list[tuple[MemoryCause, int, Callable[[int], str]]]:
    """The host-side bounds on a grow: the VMM's cgroup, then the node's budget."""
    rooms: list[tuple[MemoryCause, int, Callable[[int], str]]] = []
    cgroup = guards.cgroup
    found = None if cgroup is None else cgroup_room(cfg, cgroup, vm.total)
    if found is not None:
        room, level = found
        s = cfg.settings

        def cgroup_text(limit: int) -> str:
            return (
                f"grow to {fmt_requested(target)} clamped to {fmt_bytes(limit)} by the host cgroup "
                f"{level.path} (limit {fmt_bytes(level.limit)}): guest + VMM overhead ({fmt_bytes(s.vmm_overhead)} + "
                f"{fmt_bytes(s.vmm_overhead_per_gib)}/GiB, or what is charged beyond the guest, "
                f"whichever is more) + margin {fmt_bytes(s.host_cgroup_margin)} must fit its limit"
            )

        rooms.append(("host_cgroup", room, cgroup_text))
    elif guards.unseen is not None and guards.pod_limit is None:
        # Nothing proves a grow fits a cgroup kata-mem cannot see: hold what the VM has
        # (an update-sandbox's new pod limit is a limit known without reading the cgroup,
        # and bounds the VM on its own: hold_to_pod_limit).
        def unseen_room(limit: int) -> str:
            return (
                f"grow to {fmt_requested(target)} held at {fmt_bytes(limit)}: the VMM's host "
                "cgroup cannot be seen, so nothing proves the grow fits its limit "
                '(host_cgroup_guard = "off" grows without the guard)'
            )

        rooms.append(("host_cgroup_unseen", vm.total, unseen_room))
    node = guards.node
    if node is not None and node.budget is not None:
        budget = node.budget
        others = node.committed_others or 0
        room = align_down(max(budget - others, 0), MiB)

        def node_text(limit: int) -> str:
            return (
                f"grow to {fmt_requested(target)} clamped to {fmt_bytes(limit)} by the node budget "
                f"{fmt_bytes(budget)}: the other sandboxes hold {fmt_bytes(others)}"
            )

        rooms.append(("node_budget", room, node_text))
    return rooms


def hold_to_pod_limit(
    cfg: SizingConfig, vm: VmState, guards: Guards, target: int, upper: Upper, clamp: _ClampFn
) -> tuple[int, Upper]:
    """``target`` within the pod limit the kubelet is about to set, and the new upper
    bound. It bounds the VM whichever way it goes: a shrink to it runs through the safe
    shrink, never past the boot memory."""
    pod = guards.pod_limit
    if pod is None:
        return target, upper
    base = vm.base
    bound = max(level_room(cfg, pod, vm.total), base)
    if target > bound:
        clamp("host_cgroup", bound, _pod_limit_text(cfg, pod, target, bound, base))
        target = bound
    if bound < upper.limit:
        upper = Upper(bound, "the new pod limit's room")
    return target, upper


def host_notes(cfg: SizingConfig, guards: Guards, now: int, target: int) -> list[Note]:
    """What a plan that takes the VM from ``now`` to ``target`` warns of the host side: a
    node budget that ``node_reserved_mib`` makes 0, a grow beyond the host's MemAvailable,
    a VM already beyond what its cgroup allows."""
    notes: list[Note] = []
    node = guards.node
    reserved = (
        None if node is None or node.budget is None else reserved_problem(node.reserved, node.host)
    )
    if reserved is not None:
        notes.append(Note("node", reserved))
    if node is not None and node.available is not None:
        grow = target - now
        if grow > node.available:
            notes.append(
                Note(
                    "node",
                    f"the grow of {fmt_bytes(grow)} is more than the host's MemAvailable "
                    f"{fmt_bytes(node.available)} now: the guest may touch memory the host "
                    "has to reclaim or swap first",
                )
            )
    if guards.cgroup is not None:
        found_room = cgroup_room(cfg, guards.cgroup, now)
        if found_room is not None and now > found_room[0]:
            notes.append(
                Note(
                    "host_cgroup",
                    f"the VM ({fmt_bytes(now)}) is already more than its host cgroup "
                    f"{found_room[1].path} allows with the VMM overhead "
                    f"({fmt_bytes(found_room[0])}): the host may OOM-kill the VMM when the "
                    "guest uses its memory; shrink it or raise the limit",
                )
            )
    return notes


def reserved_problem(reserved: int, host: int) -> Optional[str]:
    """Why the node's budget is 0 when ``node_reserved_mib`` (``reserved``) leaves nothing
    of the host's memory (a plan, ``status --all`` and ``config check`` say it alike);
    ``None`` otherwise."""
    if reserved < host:
        return None
    return (
        f"node_reserved_mib ({fmt_bytes(reserved)}) is not below the host's memory "
        f"({fmt_bytes(host)}): the node budget is 0, so no sandbox can grow; lower "
        "node_reserved_mib"
    )


def _unseen_text(guards: Guards) -> str:
    """What a plan says when the VMM's host cgroup could not be seen."""
    assert guards.unseen is not None
    return f"host cgroup unseen ({guards.unseen.reason}): {guards.unseen.detail}"


def _pod_limit_text(cfg: SizingConfig, pod: CgroupLevel, target: int, bound: int, base: int) -> str:
    s = cfg.settings
    floor = " (the boot memory: the VM goes no lower)" if bound == base else ""
    return (
        f"{fmt_bytes(target)} clamped to {fmt_bytes(bound)}{floor} by the new pod limit "
        f"{fmt_bytes(pod.limit)} of {pod.path} (UpdatePodSandboxResources): guest + VMM "
        f"overhead ({fmt_bytes(s.vmm_overhead)} + {fmt_bytes(s.vmm_overhead_per_gib)}/GiB, or "
        f"what is charged beyond the guest, whichever is more) + margin "
        f"{fmt_bytes(s.host_cgroup_margin)} must fit it"
    )
