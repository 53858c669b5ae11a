"""The outcome decisions (kata_mem.core.outcomes) against the JSON case table in
tests/fixtures/outcome-cases: every status and reason, one case per branch."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional

import pytest

from kata_mem.core import outcomes
from kata_mem.core.model import (
    Clamp,
    MemoryDevice,
    MemoryPlan,
    Note,
    Outcome,
    Plan,
    Step,
    VcpuPlan,
    VmState,
)
from kata_mem.core.reports import StepProgress
from kata_mem.core.units import GiB, MiB
from kata_mem.interfaces.render import warnings_json
from tests.conftest import case_table

CASES = case_table("outcome-cases")


def build_vm(spec: dict[str, Any]) -> VmState:
    devices = tuple(
        MemoryDevice(
            id=d["id"],
            kind=d["kind"],
            size=d["size_mib"] * MiB,
            requested=d["size_mib"] * MiB,
            max_size=d.get("max_mib", d["size_mib"]) * MiB,
            block=d.get("block_mib", 0) * MiB,
            slot=d.get("slot"),
            pending_unplug=d.get("pending", False),
            memdev=d.get("memdev", ""),
            ours=d.get("ours", False),
        )
        for d in spec.get("devices", [])
    )
    return VmState(
        spec.get("base_mib", 512) * MiB,
        devices,
        slots=8,
        device_space=15 * GiB,
        unproven=tuple(spec.get("unproven", ())),
    )


def build_steps(rows: list[list[Any]], current: int) -> tuple[Step, ...]:
    """``[action, device, size_mib, delta_mib]`` rows, each from where the last left off."""
    steps = []
    for action, device, size_mib, delta_mib in rows:
        current += delta_mib * MiB
        steps.append(Step(action, device, size_mib * MiB, delta_mib * MiB, current))
    return tuple(steps)


def build_plan(spec: dict[str, Any], vm: VmState) -> Plan:
    target = spec["target_mib"] * MiB
    memory = MemoryPlan(
        host=16 * GiB,
        configured_max=0,
        max=16 * GiB,
        base=vm.base,
        requested=spec.get("requested_mib", spec["target_mib"]) * MiB,
        aligned=spec.get("aligned_mib", spec["target_mib"]) * MiB,
        target=target,
        current=vm.total,
        mechanism=spec.get("mechanism", "pc-dimm"),
        block=128 * MiB,
        clamps=tuple(Clamp(cause, target, cause) for cause in spec.get("clamps", [])),
        steps=build_steps(spec.get("steps", []), vm.total),
    )
    vcpus = VcpuPlan(host=4, max=4, default=Fraction(1), requested=Fraction(1), target=1, clamps=())
    return Plan(memory, vcpus, tuple(Note(code, text) for code, text in spec.get("notes", [])))


def check_outcome(got: Optional[Outcome], want: Optional[dict[str, Any]]) -> None:
    if want is None:
        assert got is None, got
        return
    assert got is not None
    assert (got.status, got.reason) == (want["status"], want.get("reason", got.reason)), got
    assert want.get("message", "") in got.message, got.message
    for key, value in (
        ("observed_mib", got.observed // MiB),
        ("target_mib", got.target // MiB),
        ("steps", len(got.steps)),
        ("retry_after_s", got.retry_after_s),
    ):
        if key in want:
            assert value == want[key], (key, got)


def test_every_case_says_why() -> None:
    assert CASES and all(c.get("why") for c in CASES), [c["id"] for c in CASES if not c.get("why")]
    assert len({c["id"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_outcome_case(case: dict[str, Any]) -> None:
    expect = case["expect"]
    if "stopped" in case:
        s = case["stopped"]
        state, detail = s["progress"]
        stop = outcomes.step_stopped(
            build_steps([s["step"]], 0)[0],
            StepProgress(state, detail),
            s["pressure"],
            timeout_s=s["timeout_s"],
            observed=s["observed_mib"] * MiB,
        )
        want = expect["stop"]
        assert (stop.status, stop.reason) == (want["status"], want["reason"]), stop
        assert want["message"] in stop.message, stop.message
        return
    vm = build_vm(case.get("vm", {}))
    p = build_plan(case["plan"], vm)
    if "before" in case:
        p, outcome = outcomes.before_steps(p, vm, shrink_allowed=case["before"]["shrink_allowed"])
        check_outcome(outcome, expect["outcome"])
        if "plan_steps" in expect:
            assert len(p.memory.steps) == expect["plan_steps"]
        if "warnings" in expect:
            shown = warnings_json(p.notes)
            assert len(shown) == len(expect["warnings"]), shown
            assert all(w.startswith(want) for w, want in zip(shown, expect["warnings"]))
    elif "busy" in case:
        check_outcome(outcomes.busy(p, case["busy"]["waited_s"]), expect["outcome"])
    else:
        a = case["after"]
        why = None if a["stop"] is None else outcomes.Stop(*a["stop"])
        after = VmState(a["observed_mib"] * MiB)
        done = build_steps(a["done"], vm.total)
        check_outcome(outcomes.after_steps(p, after, done, why, a["deferrals"]), expect["outcome"])
