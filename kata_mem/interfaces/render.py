"""Plans, host facts and configurations as JSON documents and as text for people.

The JSON shapes are the stable, documented interface (docs, "JSON output");
the text forms are for reading and may change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Optional

from kata_mem.core.errors import KataMemError
from kata_mem.core.guestmem import PAGE_SIZE, STRUCT_PAGE, formula
from kata_mem.core.model import (
    Clamp,
    Demand,
    GuestCeiling,
    HostCgroup,
    HostFacts,
    MemoryDevice,
    MemoryPlan,
    NodeView,
    Note,
    NoteCode,
    Outcome,
    Plan,
    SizingConfig,
    Step,
    Unseen,
)
from kata_mem.core.results import NodeStatus, Visit
from kata_mem.core.units import MiB, to_kib_floor, to_mib_ceil, to_mib_floor

if TYPE_CHECKING:  # rendered only by status, which has it loaded; a shim's answer does not
    from kata_mem.orchestration.status import SandboxStatus

PLAN_SCHEMA = "kata-mem/plan/v1"
HOST_SCHEMA = "kata-mem/host/v1"
CONFIG_SCHEMA = "kata-mem/config/v1"
ERROR_SCHEMA = "kata-mem/error/v1"
NODE_SCHEMA = "kata-mem/node/v1"


#: How a note's code shows in front of its text where the documents have always shown it so.
_NOTE_PREFIX: dict[NoteCode, str] = {
    "memory_clamp": "memory: ",
    "vcpu_clamp": "vCPUs: ",
    "shrink_not_allowed": "ShrinkNotAllowed: ",
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
        "config": {"path": cfg.path, "hypervisor": cfg.hypervisor},
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
        },
        "vcpus": {
            "host": v.host,
            "max": v.max,
            "default": float(v.default),
            "requested": float(v.requested),
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


def degraded_json(unseen: Mapping[str, Unseen]) -> dict[str, Any]:
    """``/healthz`` while some sandbox's last resize could not see QEMU's host cgroup."""
    return {
        "status": "degraded",
        "host_cgroup_unseen": [
            {"sandbox": sandbox, "reason": u.reason, "detail": u.detail}
            for sandbox, u in sorted(unseen.items())
        ],
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


def _requested(m: MemoryPlan, cfg: SizingConfig) -> str:
    """What ``requested`` is: ``pod-overhead`` without a known overhead is sized as
    ``kata`` (planner ``sized``, which warns); runtime-rs's static sizing replaces the
    model (planner ``runtime_rs_static``)."""
    if cfg.runtime == "runtime-rs" and cfg.static_sandbox_resource_mgmt:
        return "runtime-rs static sizing: overhead_memory + limits, base without any"
    if m.sizing == "pod-overhead" and m.pod_overhead is None:
        return f"{_REQUESTED['kata']} (no pod overhead known: sized as kata)"
    return _REQUESTED[m.sizing]


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
    lines += [
        "memory (MiB)",
        _row("base (default_memory)", str(to_mib_ceil(m.base))),
        _row("requested", str(to_mib_ceil(m.requested)), _requested(m, cfg)),
        _row("max", str(to_mib_floor(m.max)), max_note),
        _row(
            "target",
            str(to_mib_ceil(m.target)),
            "clamped: " + ", ".join(c.cause for c in m.clamps) if m.clamps else "",
        ),
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
    if m.node is not None and m.node.budget is not None:
        lines.append(
            f"node: budget {to_mib_floor(m.node.budget)} MiB, other sandboxes "
            f"{to_mib_ceil(m.node.committed_others or 0)} MiB"
        )
    vc = f", clamped by {', '.join(c.cause for c in v.clamps)}" if v.clamps else ""
    lines.append(
        f"vCPUs: target {v.target} (default {float(v.default):g} + containers = "
        f"{float(v.requested):g}), max {v.max}, host {v.host}{vc}"
    )
    # The clamps are shown above ("why:", and the vCPU line).
    lines += [
        f"note: {note_text(n)}" for n in plan.notes if n.code not in ("memory_clamp", "vcpu_clamp")
    ]
    return "\n".join(lines)


def host_json(host: HostFacts) -> dict[str, Any]:
    return {
        "schema": HOST_SCHEMA,
        "memory_mib": to_mib_floor(host.memory),
        "cpus": host.cpus,
        "arch": host.arch,
        "hugepage_size_kib": to_kib_floor(host.hugepage_size),
        "hugepages_total": host.hugepages_total,
        "hugepages_free": host.hugepages_free,
        "cgroup_path": host.cgroup_path or None,
        "cgroup_memory_limit_mib": None
        if host.cgroup_memory_limit is None
        else to_mib_floor(host.cgroup_memory_limit),
        "sources": {key: origin.describe() for key, origin in host.sources},
    }


def host_text(host: HostFacts) -> str:
    d = host_json(host)
    lines = [
        f"memory   {d['memory_mib']} MiB",
        f"cpus     {d['cpus']}",
        f"arch     {d['arch']}",
        f"hugepages {d['hugepages_total']} x {d['hugepage_size_kib']} KiB "
        f"({d['hugepages_free']} free)",
    ]
    if host.cgroup_path:
        limit = d["cgroup_memory_limit_mib"]
        lines.append(
            f"cgroup   {host.cgroup_path}: {'unlimited' if limit is None else f'{limit} MiB'}"
        )
    lines += [f"  {k}: {origin.describe()}" for k, origin in host.sources]
    return "\n".join(lines)


def memory_owner(cfg: SizingConfig) -> str:
    """Who resizes a VM of this configuration after boot (docs/guide/kubernetes.md, "One
    owner of each VM's memory"). Kata's runtimes hotplug by themselves on container create,
    start and update unless ``static_sandbox_resource_mgmt`` is set: the Go runtime's
    ``Sandbox.updateResources`` (src/runtime/virtcontainers/sandbox.go, called from
    ``CreateContainer``, ``StartContainer`` and container.go's ``update``) returns early
    on ``StaticResourceMgmt``, as runtime-rs's ``update_linux_resource``
    (src/runtime-rs/crates/resource/src/manager_inner.rs) does; ``sandbox_cgroup_only``
    changes where QEMU is charged, not who resizes."""
    if cfg.static_sandbox_resource_mgmt:
        return (
            "sized once at boot: Kata's runtime never resizes it (static_sandbox_resource_mgmt "
            "= true), and kata-mem plans that boot size and changes nothing"
        )
    return (
        "Kata's runtime hotplugs it by itself on container create, start and update "
        "(static_sandbox_resource_mgmt = false): let kata-mem apply (or serve) resize it only "
        "from a shim that calls kata-mem in place of that hotplug, never beside it"
    )


def config_json(cfg: SizingConfig, chosen_by: str) -> dict[str, Any]:
    s = cfg.settings
    return {
        "schema": CONFIG_SCHEMA,
        "path": cfg.path,
        "chosen_by": chosen_by,
        "files": list(cfg.files),
        "hypervisor": cfg.hypervisor,
        "memory_owner": memory_owner(cfg),
        "effective": {
            "default_memory_mib": to_mib_floor(cfg.default_memory),
            "default_maxmemory_mib": to_mib_floor(cfg.default_maxmemory),
            "memory_slots": cfg.memory_slots,
            "memory_offset_mib": to_mib_floor(cfg.memory_offset),
            "enable_virtio_mem": cfg.enable_virtio_mem,
            "enable_hugepages": cfg.enable_hugepages,
            "static_sandbox_resource_mgmt": cfg.static_sandbox_resource_mgmt,
            "default_vcpus": float(cfg.default_vcpus),
            "default_maxvcpus": cfg.default_maxvcpus,
            "runtime": cfg.runtime,
        },
        "kata_mem": {
            "dimm_block_mib": to_mib_floor(s.dimm_block),
            "virtio_mem_block_mib": to_mib_floor(s.virtio_mem_block),
            "headroom_min_mib": to_mib_floor(s.headroom_min),
            "headroom_percent": s.headroom_percent,
            "shrink_step_min_mib": to_mib_floor(s.shrink_step_min),
            "shrink_step_percent": s.shrink_step_percent,
            "step_timeout_s": s.step_timeout_s,
            "usage_max_age_s": s.usage_max_age_s,
            "stats_interval_s": s.stats_interval_s,
            "allow_shrink": s.allow_shrink,
            "state_dir": s.state_dir,
            "host_memory_cgroup": s.host_memory_cgroup,
            "hugepages_path": s.hugepages_path,
            "sizing": s.sizing,
            "pod_overhead_mib": None if s.pod_overhead is None else to_mib_floor(s.pod_overhead),
            "vmm_overhead_mib": to_mib_floor(s.vmm_overhead),
            "vmm_overhead_per_gib_mib": to_mib_floor(s.vmm_overhead_per_gib),
            "host_cgroup_margin_mib": to_mib_floor(s.host_cgroup_margin),
            "host_cgroup_guard": s.host_cgroup_guard,
            "node_reserved_mib": to_mib_floor(s.node_reserved),
            "node_overcommit": None if s.node_overcommit is None else float(s.node_overcommit),
            "runtime": s.runtime,
            "guest_onlining": s.guest_onlining,
            "guest_memmap_on_memory": s.guest_memmap_on_memory,
        },
        "sources": {key: origin.describe() for key, origin in cfg.sources},
    }


def config_text(cfg: SizingConfig, chosen_by: str) -> str:
    d = config_json(cfg, chosen_by)
    lines = [
        f"{cfg.path} (chosen by {chosen_by}); files read: {', '.join(cfg.files)}",
        "effective values:",
    ]
    src = {key: origin.describe() for key, origin in cfg.sources}
    for key, value in d["effective"].items():
        base = key.removesuffix("_mib")
        section = (
            "runtime" if base == "static_sandbox_resource_mgmt" else f"hypervisor.{cfg.hypervisor}"
        )
        origin = src.get("runtime" if key == "runtime" else f"{section}.{base}", "?")
        lines.append(f"  {key:<30} {_text(value):<10} <- {origin}")
    lines.append(f"memory after boot: {d['memory_owner']}")
    lines.append("kata-mem settings ([kata_mem]):")
    for key, value in d["kata_mem"].items():
        shown = _UNSET.get(key, "unset") if value in (None, "") else _text(value)
        lines.append(f"  {key:<30} {shown:<10} <- {src.get(f'kata_mem.{key}', '?')}")
    return "\n".join(lines)


#: What a setting left out (or "") means, for config check's text (docs, the table).
_UNSET = {
    "host_memory_cgroup": '"" (none: host memory is MemTotal alone)',
    "pod_overhead_mib": "unset (only the Pod or its annotation gives a pod overhead)",
    "node_overcommit": "unset (the node's total is reported, never enforced)",
    "runtime": "unset (inferred from the configuration)",
}


def _text(value: object) -> str:
    """A value as the TOML file spells it (true/false, not Python's True/False)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def error_json(exc: KataMemError, schema: str = ERROR_SCHEMA) -> dict[str, Any]:
    """A failure as a document (the shim's error response adds its own fields)."""
    return {
        "schema": schema,
        "error": {"kind": exc.kind, "message": exc.message, "exit_code": exc.exit_code},
    }


OUTCOME_SCHEMA = "kata-mem/outcome/v1"
STATUS_SCHEMA = "kata-mem/status/v1"


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


def _device_json(d: MemoryDevice) -> dict[str, Any]:
    return {
        "id": d.id,
        "kind": d.kind,
        "size_mib": to_mib_floor(d.size),
        "requested_mib": to_mib_floor(d.requested),
        "max_mib": to_mib_floor(d.max_size),
        "block_mib": d.block / MiB if d.block % MiB else to_mib_floor(d.block),
        "slot": d.slot,
        "memdev": d.memdev,
        "ours": d.ours,
        "pending_unplug": d.pending_unplug,
    }


def status_json(status: SandboxStatus) -> dict[str, Any]:
    """``status --json`` and GET /v1/sandboxes/ID (schema ``kata-mem/status/v1``); the
    journal as it is on disk."""
    vm, usage, record = status.vm, status.usage, status.record
    guest = None
    if usage is not None and (usage.total, usage.available, usage.free) != (None, None, None):
        # null, not an object of nulls, when the guest has reported nothing (no balloon,
        # or statistics not arrived yet); a single statistic it does not report is null.
        guest = {
            "total_mib": _to_mib_floor_or_none(usage.total),
            "available_mib": _to_mib_floor_or_none(usage.available),
            "free_mib": _to_mib_floor_or_none(usage.free),
            "used_mib": _to_mib_floor_or_none(usage.used),
            "age_s": None if usage.age is None else round(usage.age, 1),
        }
    return {
        "schema": STATUS_SCHEMA,
        "base_mib": to_mib_floor(vm.base),
        "plugged_mib": to_mib_floor(vm.plugged),
        "total_mib": to_mib_floor(vm.total),
        "slots": vm.slots,
        "slots_used": len(vm.dimms),
        "device_space_mib": None if vm.device_space is None else to_mib_floor(vm.device_space),
        "devices": [_device_json(d) for d in vm.devices],
        "orphans": list(vm.orphans),
        "unproven": list(vm.unproven),
        "guest": guest,
        "journal": None if record is None else record.to_json(),
    }


def _to_mib_floor_or_none(n: Optional[int]) -> Optional[int]:
    return None if n is None else to_mib_floor(n)


def _mib_text(n: Optional[int]) -> str:
    """A size in MiB for people; never Python's ``None``."""
    return "unknown" if n is None else f"{n} MiB"


def status_text(status: SandboxStatus) -> str:
    d, usage, record = status_json(status), status.usage, status.record
    lines = [
        f"boot memory {d['base_mib']} MiB, plugged {d['plugged_mib']} MiB, total {d['total_mib']} MiB",
        f"DIMM slots {d['slots_used']}/{d['slots']} used; device space "
        f"{_mib_text(d['device_space_mib'])}"
        + (" (this QEMU does not report it)" if d["device_space_mib"] is None else ""),
    ]
    for dev in d["devices"]:
        extra = (
            f" requested {dev['requested_mib']} MiB of {dev['max_mib']} MiB"
            if dev["kind"] == "virtio-mem"
            else f" slot {'unknown' if dev['slot'] is None else dev['slot']}, "
            + ("kata-mem's" if dev["ours"] else "not kata-mem's")
        )
        pending = " (unplug pending)" if dev["pending_unplug"] else ""
        lines.append(
            f"  {dev['kind']:<10} {dev['id'] or '(no id)':<12} {dev['size_mib']:>7} MiB{extra}{pending}"
        )
    if d["orphans"]:
        lines.append(f"orphaned backend objects: {', '.join(d['orphans'])}")
    if d["unproven"]:
        lines.append(
            f"named like kata-mem's, not in its journal (left alone): {', '.join(d['unproven'])}"
        )
    g = d["guest"]
    if g is None:
        lines.append(
            "guest: no balloon statistics"
            if usage is None
            else "guest: no balloon statistics yet (the guest has not reported; `kata-mem "
            "apply` turns its reporting on, status leaves it as it is)"
        )
    else:
        age = "age unknown" if g["age_s"] is None else f"reading {g['age_s']:g} s old"
        lines.append(
            f"guest: MemTotal {_mib_text(g['total_mib'])}, available {_mib_text(g['available_mib'])}, "
            f"free {_mib_text(g['free_mib'])} ({age})"
        )
    if record is not None:
        unplugs = ", ".join(sorted(set(record.pending_unplug))) or "none"
        lines.append(f"journal: {record.state}, pending unplug {unplugs}")
        last = record.last_outcome
        if last is not None:
            parts = (last.status, last.reason, last.message)
            lines.append("last outcome: " + " ".join(p for p in parts if p))
    return "\n".join(lines)


RECONCILE_SCHEMA = "kata-mem/reconcile/v1"


def reconcile_json(visits: list[Visit]) -> dict[str, Any]:
    return {
        "schema": RECONCILE_SCHEMA,
        "sandboxes": [
            {
                "sandbox": v.sandbox,
                "action": v.action,
                "detail": v.detail,
                "outcome": None
                if v.outcome is None
                else outcome_json(v.outcome, v.sandbox, v.notes),
                "host_cgroup_unseen": None
                if v.unseen is None
                else {"reason": v.unseen.reason, "detail": v.unseen.detail},
            }
            for v in visits
        ],
    }


def reconcile_text(visits: list[Visit]) -> str:
    if not visits:
        return "no sandboxes"
    return "\n".join(
        f"{v.sandbox}: {v.action}: {v.detail}"
        + ("" if v.unseen is None else f"; host cgroup unseen ({v.unseen.reason}): grows held")
        for v in visits
    )


def node_status_json(node: NodeStatus) -> dict[str, Any]:
    """``status --all --json`` (schema ``kata-mem/node/v1``)."""
    return {
        "schema": NODE_SCHEMA,
        "state_dir": node.state_dir,
        "state_dir_exists": node.found,
        "host_mib": to_mib_floor(node.host),
        "reserved_mib": to_mib_floor(node.reserved),
        "budget_mib": _mib_or_none(node.budget),
        "committed_mib": to_mib_ceil(node.committed),
        "sandboxes": [
            {
                "sandbox": s.sandbox,
                "backend": None if s.backend is None else s.backend.to_json(),
                "current_mib": _mib_or_none(s.current),
                "target_mib": _mib_or_none(s.target),
                "state": s.state,
                "reason": s.reason,
            }
            for s in node.sandboxes
        ],
        "skipped": list(node.skipped),
    }


def node_status_text(node: NodeStatus) -> str:
    budget = "none (report only)" if node.budget is None else f"{to_mib_floor(node.budget)} MiB"
    lines = [
        f"node: host {to_mib_floor(node.host)} MiB, reserved {to_mib_floor(node.reserved)} MiB, "
        f"budget {budget}, committed {to_mib_ceil(node.committed)} MiB "
        f"in {len(node.sandboxes)} sandbox(es)"
    ]
    for s in node.sandboxes:
        where = "backend unknown" if s.backend is None else s.backend.describe()
        current = "?" if s.current is None else str(to_mib_floor(s.current))
        target = "?" if s.target is None else str(to_mib_floor(s.target))
        state = f"{s.state}/{s.reason}" if s.reason else s.state
        lines.append(f"  {s.sandbox:<24} {current:>7} -> {target:>7} MiB  {state:<22} {where}")
    lines += [f"  skipped: {name}: not created by kata-mem" for name in node.skipped]
    if not node.found:
        lines.append(
            f"  state dir {node.state_dir} does not exist: no sandbox has been applied with it "
            "(or the path is mistyped)"
        )
    return "\n".join(lines)
