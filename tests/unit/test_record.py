"""The journal's record as a value: bytes in memory, the on-disk format of
kata-mem/journal/v1 unchanged, each change a method; the backoff's count and sizes no VM
could have (1,025 deferrals in a row; an observed_mib of 2**44 - 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kata_mem.backends.fake import FakeBackend, FakeGuest, VirtualTime
from kata_mem.core.model import MemoryDevice, OwnedDevice, Step, VmState, Workload
from kata_mem.core.outcomes import BACKOFF_MAX_S, backoff
from kata_mem.core.record import MAX_ATTEMPTS, Deferral, Record
from kata_mem.core.units import GiB, MiB
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked
from tests.support.configs import HOST

#: A journal as an earlier kata-mem wrote it (MiB on disk), every field set.
V1 = {
    "schema": "kata-mem/journal/v1",
    "sandbox": "sb",
    "state": "running",
    "step": {
        "action": "plug_dimm",
        "device": "kmdimm1",
        "size": 512 * MiB,
        "delta": 512 * MiB,
        "total_after": 1536 * MiB,
        "memdev": "kmmem1",
    },
    "phase": "issued",
    "owned": [
        {"id": "kmdimm0", "kind": "dimm", "memdev": "kmmem0", "size": 512 * MiB, "confirmed": True}
    ],
    "pending_unplug": [],
    "observed_mib": 1024,
    "target_mib": 1536,
    "deferred": {"reason": "UsageAboveTarget", "attempts": 3, "retry_at": 1.5, "target_mib": 768},
    "last_outcome": {"status": "Deferred", "reason": "UsageAboveTarget", "message": "m", "at": 1.0},
    "updated_at": 2.0,
}


def test_a_v1_journal_loads_in_bytes_and_is_written_back_unchanged() -> None:
    record = Record.from_json("sb", V1)
    assert (record.observed, record.target) == (1024 * MiB, 1536 * MiB)
    assert record.deferred is not None and record.deferred.target == 768 * MiB
    assert record.to_json() == V1  # the on-disk format: the same fields, in MiB


def test_the_goal_and_the_commitment_are_written_once() -> None:
    idle = Record("sb", observed=GiB)
    assert (idle.goal, idle.commitment) == (GiB, GiB)
    growing = idle.admit(2 * GiB)
    assert (growing.goal, growing.commitment) == (2 * GiB, 2 * GiB)
    deferred = idle.defer("UsageAboveTarget", 10.0, 512 * MiB)
    assert (deferred.goal, deferred.commitment) == (512 * MiB, GiB)
    assert Record("sb").goal is None and Record("sb").commitment == 0


def test_each_change_is_a_method_that_returns_the_next_record() -> None:
    step = Step("plug_dimm", "kmdimm0", 512 * MiB, 512 * MiB, 1536 * MiB, "kmmem0")
    start = Record("sb", observed=GiB)
    record = start.plugging(OwnedDevice("kmdimm0", "kmmem0", 512 * MiB)).begin(step, "intent")
    assert start == Record("sb", observed=GiB)  # values: the old record is unchanged
    assert (record.state, record.phase, record.owned[0].confirmed) == ("running", "intent", False)
    record = record.plugged("kmdimm0").begin(step, "issued")
    assert record.owned[0].confirmed
    done = record.finish("Resized", "", "ok", 1536 * MiB, 3.0)
    assert (done.state, done.step, done.phase, done.observed, done.target) == (
        "idle",
        None,
        "",
        1536 * MiB,
        None,
    )
    assert done.last_outcome is not None and done.last_outcome.status == "Resized"
    # A deferral's count goes on while the outcome is Deferred, and ends with any other.
    once = done.defer("UsageAboveTarget", 9.0, GiB).finish(
        "Deferred", "UsageAboveTarget", "", GiB, 4
    )
    assert once.attempts == 1
    assert once.defer("UsageAboveTarget", 9.0, GiB).attempts == 2
    assert once.finish("Resized", "", "", GiB, 5.0).deferred is None


def test_a_grow_in_flight_ends_with_the_call() -> None:
    # Kept after the call, the grow's target would hold the node's budget for a size the
    # VM may never reach (a failed or clamped grow), and be the goal of the next call.
    growing = Record("sb", observed=GiB).admit(2 * GiB)
    done = growing.finish("Infeasible", "NoFreeSlots", "no free DIMM slot", GiB, 3.0)
    assert (done.target, done.goal, done.commitment) == (None, GiB, GiB)


def test_a_deferred_shrink_is_due_from_its_retry_time_on() -> None:
    deferred = Record("sb", observed=GiB).defer("UsageAboveTarget", 100.0, 512 * MiB)
    assert [deferred.due(now) for now in (99.0, 100.0, 101.0)] == [False, True, True]
    assert not Record("sb", observed=GiB).due(100.0)
    assert Record("sb", state="running").due(0.0)
    assert Record("sb", pending_unplug=("kmdimm0",)).due(0.0)


def test_the_backoff_never_overflows_and_the_count_saturates() -> None:
    # 1,025 deferrals in a row made 30 * 2**1024 overflow a float (exit 1 from then on),
    # and a count edited to 10**12 made the call spin while holding the sandbox lock.
    assert [backoff(n) for n in (1, 2, 3, 4, 5)] == [30.0, 60.0, 120.0, 240.0, BACKOFF_MAX_S]
    assert backoff(1025) == backoff(10**12) == BACKOFF_MAX_S
    top = Record("sb", deferred=Deferral("UsageAboveTarget", MAX_ATTEMPTS, 0.0, GiB))
    assert top.defer("UsageAboveTarget", 1.0, GiB).attempts == MAX_ATTEMPTS
    huge = {**V1, "deferred": {**V1["deferred"], "attempts": 10**12}}  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="attempts"):
        Record.from_json("sb", huge)


def test_the_executor_defers_past_a_thousand_times(tmp_path: Path) -> None:
    """A shrink the guest never allows, deferred 1,100 times through the executor itself."""
    vm = VmState(
        base=512 * MiB,
        devices=(MemoryDevice("vm0", "virtio-mem", GiB, GiB, 4 * GiB, 2 * MiB),),
    )
    from tests.support.configs import write_config

    cfg_path = write_config(
        tmp_path / "c.toml", {"default_memory": 512, "enable_virtio_mem": True, "memory_slots": 1}
    )
    from kata_mem.edges.config import load_config

    cfg = load_config(cfg_path)
    fake = FakeBackend(vm, FakeGuest(used=1400 * MiB))
    time = VirtualTime()
    fake.clock, fake.sleep = time.clock, time.sleep
    state = SandboxState(tmp_path / "state", "sb")
    with state.locked(0):  # the journal of a shrink already deferred 1,099 times
        state.save(Record("sb", observed=1536 * MiB).defer("UsageAboveTarget", 0.0, 512 * MiB))
    doc = json.loads(state.path.read_text())
    doc["deferred"]["attempts"] = 1099
    state.path.write_text(json.dumps(doc))
    result = run_locked(
        state,
        lambda: fake,
        cfg,
        HOST,
        Workload(),
        Options(allow_shrink=True),
        time.clock,
        time.sleep,
    )
    assert (result.outcome.status, result.outcome.retry_after_s) == ("Deferred", BACKOFF_MAX_S)
    assert json.loads(state.path.read_text())["deferred"]["attempts"] == 1100


def test_sizes_no_vm_of_the_host_can_have_are_not_counted() -> None:
    # An observed_mib of 2**44 - 1 passed validation and blocked every other
    # sandbox's growth once a node budget was set.
    record = Record.from_json("sb", {**V1, "observed_mib": (1 << 44) - 1})
    bounded, why = record.bounded(16 * GiB)
    assert bounded.observed is None and bounded.target == 1536 * MiB
    assert why is not None and "observed_mib above the host's 16384 MiB" in why
    assert bounded.commitment == 1536 * MiB
    same, nothing = Record.from_json("sb", V1).bounded(16 * GiB)
    assert (same, nothing) == (Record.from_json("sb", V1), None)
