"""A sandbox's state (``status``, GET /v1/sandboxes/ID), the node's (``status --all``,
GET /v1/node, ``/healthz`` degraded) and a reconcile pass as JSON documents and as text.

The JSON shapes are the stable, documented interface (docs, "JSON output");
the text forms are for reading and may change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from kata_mem.core.model import MemoryDevice, Unseen
from kata_mem.core.results import NodeStatus, SandboxSummary, Visit
from kata_mem.core.units import MiB, to_mib_ceil, to_mib_floor
from kata_mem.interfaces.render import outcome_json

if TYPE_CHECKING:  # rendered only by status, which has it loaded; a shim's answer does not
    from kata_mem.orchestration.status import SandboxStatus

NODE_SCHEMA = "kata-mem/node/v1"
STATUS_SCHEMA = "kata-mem/status/v1"
RECONCILE_SCHEMA = "kata-mem/reconcile/v1"


def degraded_json(unseen: Mapping[str, Unseen]) -> dict[str, Any]:
    """``/healthz`` while some sandbox's last resize could not see QEMU's host cgroup."""
    return {
        "status": "degraded",
        "host_cgroup_unseen": [
            {"sandbox": sandbox, "reason": u.reason, "detail": u.detail}
            for sandbox, u in sorted(unseen.items())
        ],
    }


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
        "budget_mib": _to_mib_floor_or_none(node.budget),
        "committed_mib": to_mib_ceil(node.committed),
        "sandboxes": [sandbox_summary_json(s) for s in node.sandboxes],
        "skipped": list(node.skipped),
    }


def node_from_json(doc: object) -> NodeStatus:
    """The node's status as its ``kata-mem/node/v1`` document (GET /v1/node, made by
    :func:`node_status_json`) tells it, for
    ``status --all`` asked of the service to print as text: each size in the whole MiB
    the document holds, which the text shows rounded the same way again, so that the text
    is the one the files would give. No notes: the service logs its own.

    :raises ValueError: it is not such a document.
    """
    from kata_mem.core.endpoint import Endpoint
    from kata_mem.core.errors import KataMemError

    def mib(value: object) -> Optional[int]:
        if value is None:
            return None
        if type(value) is not int or value < 0:
            raise ValueError(f"not a size in MiB: {value!r}")
        return value * MiB

    def text(value: object) -> str:
        if not isinstance(value, str):
            raise ValueError(f"not a string: {value!r}")
        return value

    if not isinstance(doc, dict) or doc.get("schema") != NODE_SCHEMA:
        raise ValueError("not a kata-mem/node/v1 document")
    try:
        rows = tuple(
            SandboxSummary(
                text(row["sandbox"]),
                None if row["backend"] is None else Endpoint.from_json(row["backend"]),
                mib(row["current_mib"]),
                mib(row["target_mib"]),
                text(row["state"]),  # type: ignore[arg-type]  # shown as it is
                text(row["reason"]),  # type: ignore[arg-type]
            )
            for row in doc["sandboxes"]
        )
        host, reserved, committed = (
            mib(doc[k]) for k in ("host_mib", "reserved_mib", "committed_mib")
        )
        if host is None or reserved is None or committed is None:
            raise ValueError("a size of the node is null")
        return NodeStatus(
            host=host,
            reserved=reserved,
            budget=mib(doc["budget_mib"]),
            committed=committed,
            sandboxes=rows,
            skipped=tuple(text(name) for name in doc["skipped"]),
            state_dir=text(doc["state_dir"]),
            found=_flag(doc["state_dir_exists"]),
        )
    except (KeyError, TypeError, AttributeError, KataMemError) as exc:
        raise ValueError(f"not a kata-mem/node/v1 document: {exc}") from exc


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"not a boolean: {value!r}")
    return value


def sandbox_summary_json(s: SandboxSummary) -> dict[str, Any]:
    """One sandbox's row of ``kata-mem/node/v1`` (``sandboxes[]``)."""
    return {
        "sandbox": s.sandbox,
        "backend": None if s.backend is None else s.backend.to_json(),
        "current_mib": _to_mib_floor_or_none(s.current),
        "target_mib": _to_mib_floor_or_none(s.target),
        "state": s.state,
        "reason": s.reason,
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
