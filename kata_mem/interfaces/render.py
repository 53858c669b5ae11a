"""Plans, outcomes and errors as JSON documents and as text for people: what ``preview``
and ``apply`` print and what a shim's or the service's answer carries. The node's and a
sandbox's state are rendered in ``render_node``, host facts and configurations in
``render_config``.

The JSON shapes are the stable, documented interface (docs, "JSON output");
the text forms are for reading and may change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from kata_mem.core.errors import KataMemError
from kata_mem.core.golang import format_float32
from kata_mem.core.guestmem import PAGE_SIZE, STRUCT_PAGE, formula
from kata_mem.core.model import (
    Clamp,
    Demand,
    GuestCeiling,
    GuestPolicy,
    HostCgroup,
    MemoryPlan,
    NodeView,
    Note,
    NoteCode,
    Outcome,
    Plan,
    SizingConfig,
    Step,
    VcpuBase,
)
from kata_mem.core.units import to_kib_floor, to_mib_ceil, to_mib_floor

PLAN_SCHEMA = "kata-mem/plan/v1"
ERROR_SCHEMA = "kata-mem/error/v1"


#: How a note's code shows in front of its text where the documents have always shown it so.
_NOTE_PREFIX: dict[NoteCode, str] = {
    "memory_clamp": "memory: ",
    "vcpu_clamp": "vCPUs: ",
    "shrink_not_allowed": "ShrinkNotAllowed: ",
    "cannot_shrink": "BackendCannotShrink: ",
}


def note_text(note: Note) -> str:
    """A note as a document's ``warnings`` and the text forms show it."""
    return _NOTE_PREFIX.get(note.code, "") + note.text


def warnings_json(notes: Iterable[Note]) -> list[str]:
    return [note_text(n) for n in notes]


# Sizes the plan sets (targets, steps, clamp limits) are whole MiB by construction; any that is
# not rounds up, so that it is never under-reported. Sizes observed or configured round down.


def step_json(step: Step) -> dict[str, Any]:
    return {
        "action": step.action,
        "size_mib": to_mib_ceil(step.size),
        "device": step.device,
        "delta_mib": to_mib_floor(step.delta),
        "total_mib": to_mib_ceil(step.total_after),
    }


def _clamp_json(c: Clamp) -> dict[str, Any]:
    return {"cause": c.cause, "limit_mib": to_mib_ceil(c.limit), "detail": c.detail}


def plan_json(plan: Plan, cfg: SizingConfig) -> dict[str, Any]:
    m, v = plan.memory, plan.vcpus
    return {
        "schema": PLAN_SCHEMA,
        # Which runtime's rules and whether Kata sizes the VM only at boot: the NRI plugin
        # reads both (go/client PlanConfig) to learn whether container events are kata-mem's.
        "config": {
            "path": cfg.path,
            "hypervisor": cfg.hypervisor,
            "runtime": cfg.runtime,
            "static_sandbox_resource_mgmt": cfg.static_sandbox_resource_mgmt,
        },
        "memory": {
            "host_mib": to_mib_floor(m.host),
            "configured_max_mib": to_mib_floor(m.configured_max),
            "max_mib": to_mib_floor(m.max),
            "base_mib": to_mib_ceil(m.base),
            "requested_mib": to_mib_ceil(m.requested),
            "target_mib": to_mib_ceil(m.target),
            "current_mib": to_mib_ceil(m.current),
            "delta_mib": to_mib_ceil(m.target) - to_mib_ceil(m.current),
            "mechanism": m.mechanism,
            "block_mib": to_mib_ceil(m.block),
            "clamped_by": [c.cause for c in m.clamps],
            "clamps": [_clamp_json(c) for c in m.clamps],
            "shrink": m.shrink,
            "steps": [step_json(s) for s in m.steps],
            "sizing": {
                "model": m.sizing,
                "pod_overhead_mib": _mib_or_none(m.pod_overhead),
                "pod_overhead_from": m.pod_overhead_origin or None,
            },
            "host_cgroup": host_cgroup_json(m.host_cgroup, m.vmm_overhead),
            "host_cgroup_unseen": (
                None
                if m.host_cgroup_unseen is None
                else {"reason": m.host_cgroup_unseen.reason, "detail": m.host_cgroup_unseen.detail}
            ),
            "node": node_json(m.node),
            "workload": workload_json(m.workload),
            "guest": guest_json(m.guest),
            "guest_policy": guest_policy_json(m.guest_policy),
        },
        "vcpus": {
            "host": v.host,
            "max": v.max,
            # As Go's encoding/json writes a float32: the shortest digits that read back
            # as it (2.0000002, not a float64's 2.0000002384185791).
            "default": float(format_float32(v.default)),
            "requested": float(format_float32(v.requested)),
            "target": v.target,
            "clamped_by": [c.cause for c in v.clamps],
        },
        "warnings": warnings_json(plan.notes),
    }


def workload_json(need: Demand) -> dict[str, Any]:
    """What the plan was sized from: the workload's memory (with hugepages), hugepages
    and CPUs, each with where it came from (``containers``, ``pod_resources``,
    ``cri_annotations``), and the pod-level input read (null for none)."""
    return {
        "memory_mib": to_mib_ceil(need.total_memory),
        "memory_from": need.memory_from,
        "hugepages_mib": to_mib_ceil(need.hugepages),
        "hugepages_from": need.hugepages_from,
        "cpus": float(need.cpu),
        "cpus_from": need.cpu_from,
        "pod_resources_from": need.pod_origin or None,
    }


def _workload_line(need: Demand) -> Optional[str]:
    """The text form's line on where the workload came from, when not only the containers."""
    parts = (need.memory_from, need.hugepages_from, need.cpu_from)
    if all(p == "containers" for p in parts):
        return None
    return (
        f"workload: {to_mib_ceil(need.total_memory)} MiB (memory from {need.memory_from}, "
        f"hugepages from {need.hugepages_from}), {float(need.cpu):g} CPUs from "
        f"{need.cpu_from}" + (f"; pod-level limits: {need.pod_origin}" if need.pod_origin else "")
    )


def _mib_or_none(n: Optional[int]) -> Optional[int]:
    return None if n is None else to_mib_floor(n)


def host_cgroup_json(cg: Optional[HostCgroup], overhead: Optional[int]) -> Optional[dict[str, Any]]:
    """The VMM's host cgroup as the guard saw it (``null`` when none was found)."""
    if cg is None:
        return None
    return {
        "path": cg.path,
        "version": cg.version,
        "found_by": cg.origin,
        "limit_mib": _mib_or_none(cg.limit),
        "limits": [
            {
                "path": lvl.path,
                "limit_mib": to_mib_floor(lvl.limit),
                "usage_mib": _mib_or_none(lvl.usage),
            }
            for lvl in cg.levels
        ],
        "usage_mib": _mib_or_none(cg.usage),
        "usage_after_mib": _mib_or_none(cg.usage_after),
        "vmm_overhead_mib": None if overhead is None else to_mib_ceil(overhead),
    }


def node_json(node: Optional[NodeView]) -> Optional[dict[str, Any]]:
    """The node's total as the admission saw it (``null`` for a plan made without it)."""
    if node is None:
        return None
    return {
        "host_mib": to_mib_floor(node.host),
        "reserved_mib": to_mib_floor(node.reserved),
        "budget_mib": _mib_or_none(node.budget),
        "committed_others_mib": (
            None if node.committed_others is None else to_mib_ceil(node.committed_others)
        ),
        "available_mib": _mib_or_none(node.available),
    }


#: What ``requested`` is in each sizing model (docs, "Sizing models").
_REQUESTED = {
    "kata": "base + container limits",
    "pod-overhead": "pod overhead + container limits",
    "pod-limit": "container limits",
}


def guest_json(g: Optional[GuestCeiling]) -> Optional[dict[str, Any]]:
    """The guest's own ceiling and its arithmetic (null where none applies: no grow, static
    sizing, or memmap_on_memory counted)."""
    if g is None:
        return None
    return {
        "onlining": g.policy.onlining,
        "onlining_from": g.policy.onlining_from,
        "memmap_on_memory": g.policy.memmap_from,
        "page_kib": to_kib_floor(PAGE_SIZE[g.arch]),
        "struct_page_bytes": STRUCT_PAGE,
        "kernel_memory_mib": to_mib_floor(g.kernel_memory),
        "memmap_plugged_mib": to_mib_ceil(g.memmap_plugged),
        "estimate_mib": to_mib_floor(g.estimate),
        "reading_mib": _mib_or_none(g.reading),
        "available_mib": to_mib_floor(g.available),
        "headroom_mib": to_mib_ceil(g.headroom),
        "room_mib": to_mib_floor(g.room),
        "addable_mib": to_mib_floor(g.addable),
        "limit_mib": to_mib_floor(g.limit),
        "staged": g.policy.onlining == "kernel",
    }


def guest_policy_json(g: Optional[GuestPolicy]) -> Optional[dict[str, Any]]:
    """How the plan takes the guest to online hot-added memory, and why, whatever the plan
    does (null only for a plan that does not say)."""
    if g is None:
        return None
    return {
        "onlining": g.onlining,
        "onlining_from": g.onlining_from,
        "memmap_on_memory": g.memmap_from,
        "movable_ratio": g.movable_ratio,
    }


def _requested(m: MemoryPlan, cfg: SizingConfig) -> str:
    """What ``requested`` is: ``pod-overhead`` without a known overhead is sized as
    ``kata`` (planner ``sized``, which warns); Kata's static sizing replaces the model
    (planner ``static_size``)."""
    if m.static_sizing and cfg.runtime == "runtime-rs":
        return "runtime-rs static sizing: overhead_memory + limits, default_memory without any"
    if m.static_sizing:
        return "Kata's static sizing: default_memory + limits in whole MiB"
    if m.sizing == "pod-overhead" and m.pod_overhead is None:
        return f"{_REQUESTED['kata']} (no pod overhead known: sized as kata)"
    return _REQUESTED[m.sizing]


def _target_note(m: MemoryPlan) -> str:
    """Why the target differs from what was requested, on its row: the clamps, each said
    in full on a ``why:`` line below; or, above what was requested with no clamp, the
    whole blocks it is planned in (not a clamp, and no step adds a part of a block)."""
    if m.clamps:
        return "clamped: " + ", ".join(c.cause for c in m.clamps)
    if m.aligned < m.base:
        return "the boot memory: a VM never goes below it"
    if m.target > m.requested:
        return f"rounded up to whole {to_mib_ceil(m.block)} MiB blocks"
    return ""


#: How the vCPU line names what the containers' CPUs were added to.
_VCPU_BASE: dict[VcpuBase, str] = {"default_vcpus": "default", "overhead_vcpus": "overhead_vcpus"}


def _vcpu_clamp_text(clamp: Clamp, host: int) -> str:
    """A vCPU clamp in words (its cause names which ceiling, its limit the number)."""
    if clamp.cause == "host_cpus":
        return f"clamped to the host's {host} CPUs"
    if clamp.cause == "default_maxvcpus":
        return f"clamped to default_maxvcpus {clamp.limit}"
    # Kata's own cap per architecture (planner.ARCH_MAX_VCPUS).
    return f"clamped to {clamp.limit}, the most vCPUs Kata gives a VM on this architecture"


def _row(label: str, value: str, note: str = "") -> str:
    return f"  {label:<22}{value:>12}  {note}".rstrip()


def plan_text(plan: Plan, cfg: SizingConfig, title: str = "") -> str:
    m, v = plan.memory, plan.vcpus
    lines = []
    if title:
        lines.append(title)
    lines.append(
        f"config {cfg.path} [hypervisor.{cfg.hypervisor}]; mechanism {m.mechanism}, "
        f"block {to_mib_ceil(m.block)} MiB"
    )
    max_note = (
        f"default_maxmemory {to_mib_floor(m.configured_max)} MiB, host {to_mib_floor(m.host)} MiB"
        if m.configured_max
        else f"default_maxmemory 0 = host {to_mib_floor(m.host)} MiB"
    )
    # What set the maximum, as the planner recorded it (planner._plan_memory): the names
    # above say default_maxmemory and the host; the pool and a raise are added.
    if m.max_cause == "hugepages":
        max_note += f"; the hugepage pool holds {to_mib_floor(m.max_limit)} MiB"
    if m.max_raised == "boot_memory":
        max_note += f"; raised to the boot memory {to_mib_floor(m.max)} MiB, which is above it"
    elif m.max_raised == "boot_size":
        max_note += f"; raised to the boot size {to_mib_floor(m.max)} MiB"
    lines += [
        "memory (MiB)",
        # A VM Kata sized at boot booted with its static size, not default_memory.
        _row(
            "base (booted by Kata)" if m.static_sizing else "base (default_memory)",
            str(to_mib_ceil(m.base)),
        ),
        _row("requested", str(to_mib_ceil(m.requested)), _requested(m, cfg)),
        _row("max", str(to_mib_floor(m.max)), max_note),
        _row("target", str(to_mib_ceil(m.target)), _target_note(m)),
        _row("current", str(to_mib_ceil(m.current))),
        _row("delta", f"{to_mib_ceil(m.target) - to_mib_ceil(m.current):+d}"),
    ]
    if m.steps:
        lines.append(
            "steps" + (" (shrink: each is checked against guest usage first)" if m.shrink else "")
        )
        for i, s in enumerate(m.steps, 1):
            j = step_json(s)
            lines.append(
                f"  {i}. {s.action:<18} {s.device:<12} {j['size_mib']:>8} MiB  "
                f"({j['delta_mib']:+d} MiB, guest {j['total_mib']} MiB)"
            )
    elif any(n.code == "shrink_not_allowed" for n in plan.notes):
        lines.append("steps: none (shrinking is off: see the ShrinkNotAllowed note)")
    elif any(n.code == "cannot_shrink" for n in plan.notes):
        lines.append("steps: none (no DIMM is unplugged: see the BackendCannotShrink note)")
    else:
        lines.append("steps: none")
    for c in m.clamps:
        lines.append(f"  why: {c.cause}: {c.detail}")
    shown_workload = _workload_line(m.workload)
    if shown_workload:
        lines.append(shown_workload)
    if m.sizing != "kata" or m.pod_overhead is not None:
        shown = (
            f"pod overhead {to_mib_floor(m.pod_overhead)} MiB from {m.pod_overhead_origin}"
            if m.pod_overhead is not None
            else "pod overhead unknown"
        )
        if m.pod_overhead is not None and m.sizing != "pod-overhead":
            # Only pod-overhead sizing puts it in the VM (docs, "Sizing models").
            shown += f"; not in the VM: requested is {_requested(m, cfg)}"
        lines.append(f"sizing: {m.sizing} ({shown})")
    cg = m.host_cgroup
    if cg is not None:
        limit = "no limit" if cg.limit is None else f"limit {to_mib_floor(cg.limit)} MiB"
        binding = min(cg.levels, key=lambda level: level.limit, default=None)
        if binding is not None and binding.path != cg.path:
            limit += f" at {binding.path}"  # a parent's: the level that binds
        used = "" if cg.usage is None else f", charged {to_mib_floor(cg.usage)} MiB"
        after = "" if cg.usage_after is None else f" (after: {to_mib_floor(cg.usage_after)} MiB)"
        vmm = "" if m.vmm_overhead is None else f", VMM overhead {to_mib_ceil(m.vmm_overhead)} MiB"
        lines.append(
            f"host cgroup: {cg.path} (v{cg.version}, {cg.origin}): {limit}{used}{after}{vmm}"
        )
    if m.guest is not None:
        staged = (
            " (kernel onlining: staged, each step within it)"
            if m.guest.policy.onlining == "kernel"
            else ""
        )
        lines.append(f"guest memmap{staged}: {formula(m.guest)}")
    elif m.guest_policy is not None:
        # The onlining the plan assumed, whatever it does: it says what a grow can describe
        # and whether a DIMM can be given back.
        memmap = m.guest_policy.memmap_from
        lines.append(
            f"guest onlining: {m.guest_policy.onlining} ({m.guest_policy.onlining_from})"
            + ("" if memmap == "off" else f"; memmap_on_memory: {memmap}")
        )
    if m.node is not None and m.node.budget is not None:
        lines.append(
            f"node: budget {to_mib_floor(m.node.budget)} MiB, other sandboxes "
            f"{to_mib_ceil(m.node.committed_others or 0)} MiB"
        )
    vc = "".join(f", {_vcpu_clamp_text(c, v.host)}" for c in v.clamps)
    # What the containers' CPUs were added to (planner._plan_vcpus): default_vcpus, or
    # runtime-rs static sizing's overhead_vcpus, whose sum boots as at least 1 vCPU. The
    # numbers are the float32s Kata holds, as Go prints them: 2.0000002, not 2.
    summed = format_float32(v.requested)
    if v.raised_from is not None:
        summed = f"{format_float32(v.raised_from)}, at least {summed}"
    lines.append(
        f"vCPUs: target {v.target} ({_VCPU_BASE[v.added_to]} {format_float32(v.base)} + "
        f"containers {format_float32(v.containers)} = {summed}), max {v.max}, host {v.host}{vc}"
    )
    # The clamps are shown above ("why:", and the vCPU line).
    lines += [
        f"note: {note_text(n)}" for n in plan.notes if n.code not in ("memory_clamp", "vcpu_clamp")
    ]
    return "\n".join(lines)


def error_json(exc: KataMemError, schema: str = ERROR_SCHEMA) -> dict[str, Any]:
    """A failure as a document (the shim's error response adds its own fields)."""
    return {
        "schema": schema,
        "error": {"kind": exc.kind, "message": exc.message, "exit_code": exc.exit_code},
    }


OUTCOME_SCHEMA = "kata-mem/outcome/v1"


def outcome_json(outcome: Outcome, sandbox: str, notes: Iterable[Note] = ()) -> dict[str, Any]:
    return {
        "schema": OUTCOME_SCHEMA,
        "sandbox": sandbox,
        "status": outcome.status,
        "reason": outcome.reason,
        "message": outcome.message,
        "observed_mib": to_mib_floor(outcome.observed),
        "target_mib": to_mib_ceil(outcome.target),
        "steps": [step_json(s) for s in outcome.steps],
        "retry_after_s": outcome.retry_after_s,
        "warnings": warnings_json(notes),
    }


def outcome_text(outcome: Outcome, notes: Iterable[Note] = ()) -> str:
    head = f"{outcome.status}{f' ({outcome.reason})' if outcome.reason else ''}: {outcome.message}"
    lines = [
        head,
        f"guest memory {to_mib_floor(outcome.observed)} MiB, target {to_mib_ceil(outcome.target)} MiB",
    ]
    for i, s in enumerate(outcome.steps, 1):
        j = step_json(s)
        lines.append(
            f"  done {i}. {s.action} {s.device} {j['size_mib']} MiB ({j['delta_mib']:+d} MiB)"
        )
    if outcome.retry_after_s is not None:
        lines.append(f"retry after {outcome.retry_after_s:g} s")
    lines += [f"note: {note_text(n)}" for n in notes]
    return "\n".join(lines)
