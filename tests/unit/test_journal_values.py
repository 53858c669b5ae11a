"""The journal is kata-mem's own input from disk: ``Record.from_json`` accepts only what
the writer produces. A value out of range or inconsistent makes the record corrupt, and
a corrupt record is rebuilt from the hypervisor with a warning (docs, "State, locking
and recovery"). A journal written before kata-mem recorded the devices it creates still
loads, with nothing in it proven kata-mem's."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.model import OwnedDevice, Step
from kata_mem.core.record import Deferral, LastOutcome, PendingGrow, Record
from kata_mem.core.units import MiB

#: A journal as the executor writes it mid-unplug, with every field set.
from kata_mem.edges.journal import SandboxState

#: A journal as the executor writes it mid-unplug, with every field set.
RECORD = Record(
    "sb",
    state="running",
    step=Step("unplug_dimm", "kmdimm1", 256 * MiB, -256 * MiB, 768 * MiB, "kmmem1"),
    phase="issued",
    owned=tuple(
        [
            OwnedDevice("kmdimm0", "kmmem0", 256 * MiB, confirmed=True),
            OwnedDevice("kmdimm1", "kmmem1", 256 * MiB, confirmed=True),
        ]
    ),
    pending_unplug=tuple(["kmdimm1"]),
    observed=1024 * MiB,
    target=1024 * MiB,
    deferred=Deferral("UsageAboveTarget", 2, 1_700_000_060.0, 512 * MiB),
    last_outcome=LastOutcome("Deferred", "UsageAboveTarget", "guest usage ...", 1_700_000_000.0),
    updated_at=1_700_000_000.5,
    pending_grow=PendingGrow(1536 * MiB, "/sys/fs/cgroup/kubepods/pod1", 1024 * MiB),
)


def test_what_the_writer_writes_loads_back() -> None:
    doc = json.loads(json.dumps(RECORD.to_json()))
    assert Record.from_json("sb", doc) == RECORD


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, key = path.split(".")
    for part in parents:
        doc = doc[part] if not part.isdigit() else doc[int(part)]  # type: ignore[index]
    if value is _DELETE:
        del doc[key]
    elif key.isdigit():
        doc[int(key)] = value  # type: ignore[index]
    else:
        doc[key] = value


_DELETE = object()

#: (field path, value, what the error says): each makes the journal corrupt.
CORRUPT = [
    ("sandbox", "other-sandbox", "not this sandbox"),
    ("sandbox", _DELETE, "not this sandbox"),
    ("observed_mib", -5, "observed_mib"),
    ("observed_mib", 1 << 60, "observed_mib"),
    ("target_mib", -1, "target_mib"),
    ("phase", "", "do not agree"),  # a step in flight without its phase
    ("step", None, "do not agree"),  # a phase without a step
    ("state", "idle", "do not agree"),  # idle with a step in flight
    ("step.size", -256 * MiB, "step is not a step"),
    ("step.delta", 256 * MiB, "inconsistent"),  # an unplug that adds memory
    ("step.device", None, "step is not a step"),
    ("step.total_after", -1, "step is not a step"),
    ("step.action", "format_disk", "step is not a step"),
    ("pending_unplug", [""], "pending_unplug"),
    ("deferred.retry_at", float("inf"), "deferred"),
    ("deferred.retry_at", float("nan"), "deferred"),
    ("deferred.retry_at", 10**400, "deferred"),  # too large for a float: no OverflowError
    ("deferred.retry_at", -1.0, "deferred"),
    ("deferred.attempts", 0, "attempts"),
    ("deferred.reason", "Soon", "reason"),
    ("deferred.target_mib", -512, "deferred"),
    ("last_outcome.status", "Exploded", "unknown status"),
    ("last_outcome.reason", "Because", "unknown status or reason"),
    ("last_outcome.at", float("inf"), "last_outcome"),
    ("updated_at", float("-inf"), "updated_at"),
    ("owned", {"kmdimm0": 1}, "owned is not a list"),
    ("owned.0.size", -1, "owned is not a list of devices"),
    ("owned.0.size", 0, "owned is not a list of devices"),
    ("owned.0.kind", "virtio-mem", "owned is not a list of devices"),
    ("owned.0.id", "", "owned is not a list of devices"),
    # An owned id no kata-mem id looks like (a path) was accepted.
    ("owned.0.id", "../x", r"owned id \"../x\" is not a QEMU id"),
    ("owned.0.memdev", "kmmem0/../x", r"owned memdev \"kmmem0/../x\" is not a QEMU id"),
    ("owned.0.id", "0dimm", "is not a QEMU id"),
    ("owned.0.memdev", None, "owned is not a list of devices"),
    ("owned.0.confirmed", "yes", "owned is not a list of devices"),
    ("owned.0", "kmdimm0", "owned is not a list of devices"),
    ("owned.0.id", "kmdimm1", "twice"),
    ("owned.0.memdev", "kmmem1", "twice"),
    ("pending_grow", 1536, "pending_grow"),
    ("pending_grow.target_mib", -1, "pending_grow"),
    ("pending_grow.cgroup", "kubepods/pod1", "pending_grow"),
    ("pending_grow.cgroup", None, "pending_grow"),
    ("pending_grow.limit_mib", "1Gi", "pending_grow"),
]


@pytest.mark.parametrize(
    ("path", "value", "why"),
    CORRUPT,
    ids=[f"{p}={'(deleted)' if v is _DELETE else repr(v)}"[:60] for p, v, _ in CORRUPT],
)
def test_a_value_out_of_range_or_inconsistent_is_corrupt(path: str, value: Any, why: str) -> None:
    doc = copy.deepcopy(RECORD.to_json())
    _set(doc, path, value)
    with pytest.raises(ValueError, match=why):
        Record.from_json("sb", json.loads(json.dumps(doc)))


def test_an_idle_journal_has_no_step_and_no_phase() -> None:
    idle = Record("sb", owned=tuple([OwnedDevice("kmdimm0", "", 128 * MiB)]), observed=640 * MiB)
    assert Record.from_json("sb", idle.to_json()) == idle  # libvirt: no backend object


def test_a_journal_from_before_ownership_loads_and_owns_nothing() -> None:
    doc = RECORD.to_json()
    del doc["owned"]
    del doc["step"]["memdev"]
    record = Record.from_json("sb", doc)
    assert (record.owned, record.legacy, record.pending_unplug) == ((), True, ("kmdimm1",))
    assert record.step is not None and record.step.memdev == ""
    # Written back, it is a current journal (repair drops the pending unplug of a DIMM
    # that is not provably kata-mem's).
    assert not Record.from_json("sb", record.to_json()).legacy


def test_a_corrupt_journal_is_rebuilt_with_a_warning(tmp_path: Path) -> None:
    state = SandboxState(tmp_path / "state", "sb")
    doc = Record("sb", observed=768 * MiB).to_json()
    doc["observed_mib"] = -5
    with state.locked(0):
        state.path.write_text(json.dumps(doc))
    assert state.load() == Record("sb")
    assert [n.text for n in state.notes] == [
        f"journal {state.path} is corrupt or truncated (observed_mib is not a size in MiB); "
        "rebuilt from the hypervisor"
    ]
