"""The journal's record of one sandbox, and its rules: a frozen value, sizes in bytes,
with each change the executor and the repair make written here once, as a method that
returns the next record. Pure; :mod:`kata_mem.edges.journal` reads and writes it.

On disk it is ``kata-mem/journal/v1`` (docs, "State, locking and recovery"), whose
sizes are whole MiB (``observed_mib``, ``target_mib``, ``deferred.target_mib``); fields
are only ever added, so journals of older versions load (one without ``owned``, written
before kata-mem recorded the devices it created, proves none of them its own).

The record is a hint for recovery, never the truth about what is plugged: the
hypervisor is. Anything a writer would not produce is refused by :meth:`Record.from_json`
(the caller rebuilds it from the hypervisor, with a note).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal, Optional, get_args

from kata_mem.core.model import OwnedDevice, Reason, Status, Step, StepAction
from kata_mem.core.units import MiB, to_mib_ceil, to_mib_floor
from kata_mem.core.values import Frozen, replace

JOURNAL_SCHEMA = "kata-mem/journal/v1"

RecordState = Literal["idle", "running"]
#: Of the step in flight: its intent was written, its commands were sent, it was done.
Phase = Literal["", "intent", "issued", "done"]
_ACTIONS: tuple[StepAction, ...] = get_args(StepAction)
_PHASES: tuple[Phase, ...] = get_args(Phase)
_STATUSES: tuple[Status, ...] = get_args(Status)
_REASONS: tuple[Reason, ...] = get_args(Reason)

#: Sizes in bytes are what QEMU takes: unsigned 64-bit.
_SIZE_LIMIT = 1 << 64
_MIB_LIMIT = to_mib_floor(_SIZE_LIMIT)
#: A shrink deferred this often in a row keeps this count: the backoff is long at its cap
#: already, and a count read back stays a small number (docs: "Retried, never escalated").
MAX_ATTEMPTS = 1 << 20


def _int_field(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size_field(value: Any, limit: int = _SIZE_LIMIT) -> bool:
    """A size (bytes, or MiB with ``limit`` in MiB): an integer that is not negative."""
    return _int_field(value) and 0 <= value < limit


def _mib_field(value: Any) -> bool:
    return value is None or _size_field(value, _MIB_LIMIT)


def _time_field(value: Any) -> bool:
    """A time stamp (seconds since the epoch): finite and not negative."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value)) and value >= 0
    except OverflowError:  # an integer too large for a float
        return False


def _id_field(value: Any) -> bool:
    return isinstance(value, str) and value != ""


#: QEMU's id syntax (util/id.c ``id_wellformed``): a letter, then letters, digits, ``-``,
#: ``.`` or ``_``. Every id kata-mem creates has it (``kmdimm0``, ``kmmem0``; libvirt's
#: ``ua-kmdimm0`` is recorded without its prefix), so an owned id outside it (``../x``)
#: was not written by kata-mem.
_QEMU_ID = re.compile(r"[A-Za-z][A-Za-z0-9._-]*", re.ASCII)


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def _bytes(mib: Optional[int]) -> Optional[int]:
    return None if mib is None else mib * MiB


class Deferral(Frozen):
    """A deferred shrink: why, how often in a row, when to retry, and its target (bytes)."""

    reason: Reason
    attempts: int
    retry_at: float
    target: Optional[int] = None

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "attempts": self.attempts,
            "retry_at": self.retry_at,
            "target_mib": None if self.target is None else to_mib_floor(self.target),
        }

    @classmethod
    def from_json(cls, doc: Any) -> Deferral:
        _check(
            isinstance(doc, dict)
            and _time_field(doc.get("retry_at"))
            and _int_field(doc.get("attempts"))
            and isinstance(doc.get("reason"), str)
            and _mib_field(doc.get("target_mib")),
            "deferred is not a deferral (reason, attempts, retry_at)",
        )
        reason = doc["reason"]
        _check(reason in _REASONS and reason != "", "deferred.reason is not a reason")
        _check(
            1 <= doc["attempts"] <= MAX_ATTEMPTS,
            f"deferred.attempts is not a count from 1 to {MAX_ATTEMPTS}",
        )
        return cls(reason, doc["attempts"], float(doc["retry_at"]), _bytes(doc.get("target_mib")))


class LastOutcome(Frozen):
    """What the last call came to, and when (host clock)."""

    status: Status
    reason: Reason
    message: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, doc: Any) -> LastOutcome:
        _check(
            isinstance(doc, dict)
            and all(isinstance(doc.get(k), str) for k in ("status", "reason", "message"))
            and _time_field(doc.get("at")),
            "last_outcome is not an outcome (status, reason, message, at)",
        )
        status, reason = doc["status"], doc["reason"]
        _check(
            status in _STATUSES and reason in _REASONS,
            "last_outcome has an unknown status or reason",
        )
        return cls(status, reason, doc["message"], float(doc["at"]))


class PendingGrow(Frozen):
    """A grow the host cgroup in force did not allow: the target it is to reach (bytes),
    the VMM's cgroup directory and its effective limit when it was recorded (``None``:
    none). On a pod resize the kubelet raises the pod cgroup only after the runtime has
    answered (docs, "Kubernetes in-place resize"): a later call completes the grow,
    and the service's loop makes that call once the limit has changed."""

    target: int
    cgroup: str
    limit: Optional[int]

    def to_json(self) -> dict[str, Any]:
        return {
            "target_mib": to_mib_floor(self.target),
            "cgroup": self.cgroup,
            "limit_mib": None if self.limit is None else to_mib_floor(self.limit),
        }

    @classmethod
    def from_json(cls, doc: Any) -> PendingGrow:
        _check(
            isinstance(doc, dict)
            and _size_field(doc.get("target_mib"), _MIB_LIMIT)
            and isinstance(doc.get("cgroup"), str)
            and doc["cgroup"].startswith("/")
            and _mib_field(doc.get("limit_mib")),
            "pending_grow is not a pending grow (target_mib, cgroup, limit_mib)",
        )
        limit = doc.get("limit_mib")
        return cls(doc["target_mib"] * MiB, doc["cgroup"], _bytes(limit))


def _step_json(step: Step) -> dict[str, Any]:
    return {
        "action": step.action,
        "device": step.device,
        "size": step.size,
        "delta": step.delta,
        "total_after": step.total_after,
        "memdev": step.memdev,
    }


def _step_from_json(doc: Any) -> Step:
    _check(
        isinstance(doc, dict)
        and doc.get("action") in _ACTIONS
        # Any string: a virtio-mem device is resized under whatever id QEMU reports.
        and isinstance(doc.get("device"), str)
        and isinstance(doc.get("memdev", ""), str)
        and _size_field(doc.get("size"))
        and _int_field(doc.get("delta"))
        and _size_field(doc.get("total_after", 0)),
        "step is not a step",
    )
    action, size, delta = doc["action"], doc["size"], doc["delta"]
    # What each action changes (the executor's own steps): a DIMM comes or goes whole,
    # deleting a backend object changes no memory.
    consistent = {
        "plug_dimm": size > 0 and delta == size,
        "unplug_dimm": size > 0 and delta == -size,
        "delete_memdev": delta == 0,
        "resize_virtio_mem": abs(delta) < _SIZE_LIMIT,
    }[action]
    _check(consistent, f"step {action} has an inconsistent size or delta")
    # Journals written before total_after and memdev were kept have neither; only the
    # action and device of a step in flight are used to repair it.
    return Step(
        action, doc["device"], size, delta, doc.get("total_after", 0), doc.get("memdev", "")
    )


def _owned_json(dev: OwnedDevice) -> dict[str, Any]:
    return {
        "id": dev.id,
        "kind": dev.kind,
        "memdev": dev.memdev,
        "size": dev.size,
        "confirmed": dev.confirmed,
    }


def _owned_from_json(doc: Any) -> tuple[OwnedDevice, ...]:
    _check(isinstance(doc, list), "owned is not a list of devices")
    owned = []
    for entry in doc:
        if isinstance(entry, dict):
            for key in ("id", "memdev"):
                name = entry.get(key)
                _check(
                    not isinstance(name, str) or name == "" or bool(_QEMU_ID.fullmatch(name)),
                    f"owned {key} {json.dumps(name)[:80]} is not a QEMU id (a letter, then "
                    "letters, digits, '-', '.' or '_'), as every id kata-mem creates is",
                )
        _check(
            isinstance(entry, dict)
            and _id_field(entry.get("id"))
            and entry.get("kind") == "dimm"
            and isinstance(entry.get("memdev"), str)
            and _size_field(entry.get("size"))
            and entry["size"] > 0
            and isinstance(entry.get("confirmed"), bool),
            "owned is not a list of devices (id, kind dimm, memdev, size, confirmed)",
        )
        owned.append(
            OwnedDevice(entry["id"], entry["memdev"], entry["size"], "dimm", entry["confirmed"])
        )
    ids = [o.id for o in owned]
    memdevs = [o.memdev for o in owned if o.memdev]
    _check(
        len(set(ids)) == len(ids) and len(set(memdevs)) == len(memdevs),
        "owned names a device or backend object twice",
    )
    return tuple(owned)


class Record(Frozen):
    """The intent record of one sandbox: the step in flight and its ``phase``, the devices
    kata-mem created, unplugs the guest has not finished, the last observed size and the
    target of a grow in flight (bytes), a deferred shrink, the last outcome."""

    sandbox: str
    state: RecordState = "idle"
    step: Optional[Step] = None
    phase: Phase = ""
    #: The devices kata-mem created and has not removed yet: the proof that they are its own.
    owned: tuple[OwnedDevice, ...] = ()
    pending_unplug: tuple[str, ...] = ()
    observed: Optional[int] = None
    #: The target of a grow admitted against the node's budget and not finished yet.
    target: Optional[int] = None
    deferred: Optional[Deferral] = None
    last_outcome: Optional[LastOutcome] = None
    updated_at: float = 0.0
    #: A grow the host cgroup in force held back, to complete once its limit is raised.
    pending_grow: Optional[PendingGrow] = None
    #: Read from a journal of a kata-mem that did not record the devices it created (no
    #: ``owned``): none of the VM's devices can be proven kata-mem's. Not written back.
    legacy: bool = False

    # -- what it says ---------------------------------------------------------------------

    @property
    def commitment(self) -> int:
        """Bytes the sandbox holds or is growing to (the node's budget counts these): the
        larger of its observed size and the target of a grow in flight."""
        return max(self.observed or 0, self.target or 0)

    @property
    def goal(self) -> Optional[int]:
        """What the sandbox is being taken to: a grow in flight, else a deferred shrink's
        target, else what it has (``None`` when nothing is known)."""
        if self.target is not None:
            return self.target
        if self.deferred is not None and self.deferred.target is not None:
            return self.deferred.target
        return self.observed

    @property
    def attempts(self) -> int:
        """How often in a row the current shrink was deferred."""
        return self.deferred.attempts if self.deferred is not None else 0

    def due(self, now: float) -> bool:
        """Whether the record asks for a call: a step a crash cut short, an unplug the
        guest may have finished, a deferred shrink whose retry time has come."""
        return (
            self.state == "running"
            or bool(self.pending_unplug)
            or (self.deferred is not None and self.deferred.retry_at <= now)
        )

    def bounded(self, limit: int) -> tuple[Record, Optional[str]]:
        """The record without sizes above ``limit`` (bytes: what any VM of this host can
        have), and why they were dropped. A size no VM could have is damage, not a fact:
        it is read from the hypervisor again by the sandbox's next call, while the node's
        total does not count it (docs, "The node's total")."""
        too_big = [
            name
            for name, size in (
                ("observed_mib", self.observed),
                ("target_mib", self.target),
                ("deferred.target_mib", self.deferred.target if self.deferred else None),
            )
            if size is not None and size > limit
        ]
        if not too_big:
            return self, None
        deferred = self.deferred
        if deferred is not None and deferred.target is not None and deferred.target > limit:
            deferred = replace(deferred, target=None)
        bounded = replace(
            self,
            observed=None if (self.observed or 0) > limit else self.observed,
            target=None if (self.target or 0) > limit else self.target,
            deferred=deferred,
        )
        return bounded, (
            f"{', '.join(too_big)} above the host's {to_mib_floor(limit)} MiB, which no VM "
            "of this host can have: not counted, and read from the VM by the next apply"
        )

    # -- its changes ------------------------------------------------------------------------

    def begin(self, step: Step, phase: Phase) -> Record:
        """A step is in flight, at ``phase``: its intent is written, or its commands sent."""
        return replace(self, state="running", step=step, phase=phase)

    def plugging(self, device: OwnedDevice) -> Record:
        """A DIMM kata-mem is about to plug: recorded before the command, so that after a
        crash between object-add and device_add the entry proves the backend object is
        kata-mem's to delete."""
        rest = tuple(o for o in self.owned if o.id != device.id)
        return replace(self, owned=(*rest, device))

    def plugged(self, device_id: str) -> Record:
        """The hypervisor accepted the plug of ``device_id``."""
        return replace(
            self,
            owned=tuple(replace(o, confirmed=True) if o.id == device_id else o for o in self.owned),
        )

    def keep_owned(self, owned: tuple[OwnedDevice, ...]) -> Record:
        """Only ``owned`` are still there to be proven kata-mem's."""
        return replace(self, owned=owned)

    def unplug_pending(self, device_id: str) -> Record:
        """A DIMM's unplug was sent and not finished: it stays counted as plugged."""
        if device_id in self.pending_unplug:
            return self
        return replace(self, pending_unplug=(*self.pending_unplug, device_id))

    def admit(self, target: int) -> Record:
        """A grow to ``target`` admitted against the node's budget."""
        return replace(self, target=target)

    def defer(self, reason: Reason, retry_at: float, target: int) -> Record:
        """The shrink to ``target`` was deferred once more (the count saturates)."""
        attempts = min(self.attempts + 1, MAX_ATTEMPTS)
        return replace(self, deferred=Deferral(reason, attempts, retry_at, target))

    def repaired(
        self, total: int, pending: tuple[str, ...], owned: tuple[OwnedDevice, ...]
    ) -> Record:
        """Made to match the hypervisor: nothing in flight, the VM at ``total`` bytes."""
        return replace(
            self,
            state="idle",
            step=None,
            phase="",
            pending_unplug=pending,
            owned=owned,
            observed=total,
        )

    def finish(
        self, status: Status, reason: Reason, message: str, observed: int, at: float
    ) -> Record:
        """The call is over: nothing in flight, the VM at ``observed`` bytes, the grow (if
        any) over, a deferral kept only for a Deferred outcome (its count goes on)."""
        return replace(
            self,
            state="idle",
            step=None,
            phase="",
            observed=observed,
            target=None,
            deferred=self.deferred if status == "Deferred" else None,
            last_outcome=LastOutcome(status, reason, message, at),
        )

    def grow_held(self, pending: Optional[PendingGrow]) -> Record:
        """What the call left of a grow for a raised cgroup (``None``: nothing)."""
        return replace(self, pending_grow=pending)

    def stamped(self, now: float) -> Record:
        return replace(self, updated_at=now)

    # -- on disk ----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": JOURNAL_SCHEMA,
            "sandbox": self.sandbox,
            "state": self.state,
            "step": None if self.step is None else _step_json(self.step),
            "phase": self.phase,
            "owned": [_owned_json(o) for o in self.owned],
            "pending_unplug": sorted(set(self.pending_unplug)),
            # Observed sizes round down, the target a grow was admitted for rounds up:
            # neither is ever under-counted against the node's budget by more than a MiB.
            "observed_mib": None if self.observed is None else to_mib_floor(self.observed),
            "target_mib": None if self.target is None else to_mib_ceil(self.target),
            "deferred": None if self.deferred is None else self.deferred.to_json(),
            "last_outcome": None if self.last_outcome is None else self.last_outcome.to_json(),
            "updated_at": self.updated_at,
            # Written only when there is one: a journal without it reads as it did.
            **({} if self.pending_grow is None else {"pending_grow": self.pending_grow.to_json()}),
        }

    @classmethod
    def from_json(cls, sandbox: str, doc: Any) -> Record:
        """:raises ValueError: on any shape, type or value the writer would not produce."""
        _check(
            isinstance(doc, dict) and doc.get("schema") == JOURNAL_SCHEMA, "not a kata-mem journal"
        )
        _check(
            doc.get("sandbox") == sandbox,
            f"sandbox is {doc.get('sandbox')!r}, not this sandbox {sandbox!r}",
        )
        state = doc.get("state", "idle")
        _check(state in ("idle", "running"), "state is not idle or running")
        phase = doc.get("phase", "")
        _check(phase in _PHASES, f"phase is not one of {', '.join(map(repr, _PHASES))}")
        pending = doc.get("pending_unplug") or []
        _check(
            isinstance(pending, list) and all(_id_field(p) for p in pending),
            "pending_unplug is not a list of ids",
        )
        step = doc.get("step")
        step = None if step is None else _step_from_json(step)
        # The executor writes a step with its phase and state "running", and clears all three.
        _check(
            (step is None) == (phase == "") and (step is None or state == "running"),
            "state, step and phase do not agree (a step in flight has a phase, and the state "
            "is then running)",
        )
        legacy = "owned" not in doc
        owned = () if legacy else _owned_from_json(doc["owned"])
        observed = doc.get("observed_mib")
        _check(_mib_field(observed), "observed_mib is not a size in MiB")
        target = doc.get("target_mib")
        _check(_mib_field(target), "target_mib is not a size in MiB")
        deferred = doc.get("deferred")
        deferred = None if deferred is None else Deferral.from_json(deferred)
        last = doc.get("last_outcome")
        last = None if last is None else LastOutcome.from_json(last)
        updated = doc.get("updated_at", 0.0)
        _check(_time_field(updated), "updated_at is not a time")
        grow = doc.get("pending_grow")
        return cls(
            sandbox=sandbox,
            state=state,
            step=step,
            phase=phase,
            owned=owned,
            pending_unplug=tuple(dict.fromkeys(pending)),
            observed=_bytes(observed),
            target=_bytes(target),
            deferred=deferred,
            last_outcome=last,
            updated_at=float(updated),
            legacy=legacy,
            pending_grow=None if grow is None else PendingGrow.from_json(grow),
        )
