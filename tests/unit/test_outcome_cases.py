"""The outcome decisions (kata_mem.core.outcomes) against the JSON case tables in
tests/fixtures/outcome-cases: every status and reason, one case per branch; what a case
may hold: tests/fixtures/schemas/{before-steps,after-steps,step-stopped}.schema.json."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any, Optional

import pytest

from kata_mem.core import outcomes
from kata_mem.core.model import (
    Clamp,
    Container,
    GuestPolicy,
    HostFacts,
    MemoryDevice,
    MemoryPlan,
    Note,
    Outcome,
    Plan,
    SizingConfig,
    Step,
    VcpuPlan,
    VmState,
    Workload,
)
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import assumed_vm
from kata_mem.core.reports import StepProgress
from kata_mem.core.units import GiB, MiB
from kata_mem.interfaces.render import warnings_json
from tests.support.cases import build_vm, case_params


def build_steps(rows: list[list[Any]], current: int) -> tuple[Step, ...]:
    """``[action, device, size_mib, delta_mib]`` rows, each from where the last left off."""
    steps = []
    for action, device, size_mib, delta_mib in rows:
        current += delta_mib * MiB
        steps.append(Step(action, device, size_mib * MiB, delta_mib * MiB, current))
    return tuple(steps)


def build_policy(spec: Optional[dict[str, Any]]) -> Optional[GuestPolicy]:
    """The onlining a case's plan assumes (None: the plan does not say)."""
    if spec is None:
        return None
    return GuestPolicy(spec["onlining"], spec["from"], False, "off", spec.get("movable_ratio"))


def build_clamp(spec: Any, target: int) -> Clamp:
    """A cause (at the plan's target), or ``[cause, limit_mib]``; its detail is the cause."""
    if isinstance(spec, str):
        return Clamp(spec, target, spec)  # type: ignore[arg-type]  # the schema's causes
    return Clamp(spec[0], spec[1] * MiB, spec[0])


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
        clamps=tuple(build_clamp(c, target) for c in spec.get("clamps", [])),
        steps=build_steps(spec.get("steps", []), vm.total),
        guest_policy=build_policy(spec.get("onlining")),
        static_sizing=spec.get("static_sizing", False),
    )
    vcpus = VcpuPlan(host=4, max=4, default=Fraction(1), requested=Fraction(1), target=1, clamps=())
    return Plan(memory, vcpus, tuple(Note(code, text) for code, text in spec.get("notes", [])))


def check_outcome(got: Optional[Outcome], want: Optional[dict[str, Any]]) -> None:
    """Status and reason equal, the message containing the fragment, and every other
    field the case gives equal (the schema makes status, reason and message required)."""
    if want is None:
        assert got is None, got
        return
    assert got is not None
    assert (got.status, got.reason) == (want["status"], want["reason"]), got
    assert want["message"] in got.message, got.message
    fields = {
        "observed_mib": got.observed // MiB,
        "target_mib": got.target // MiB,
        "steps": len(got.steps),
        "retry_after_s": got.retry_after_s,
    }
    for key, value in want.items():
        if key not in ("status", "reason", "message"):
            assert fields[key] == value, (key, got)


@pytest.mark.parametrize("case", case_params("before-steps"))
def test_before_steps(case: dict[str, Any]) -> None:
    vm = build_vm(case.get("vm", {}))
    expect = case["expect"]
    p, outcome = outcomes.before_steps(
        build_plan(case["plan"], vm), vm, shrink_allowed=case["before"]["shrink_allowed"]
    )
    check_outcome(outcome, expect["outcome"])
    assert len(p.memory.steps) == expect["plan_steps"]
    if "warnings" in expect:
        shown = warnings_json(p.notes)
        assert len(shown) == len(expect["warnings"]), shown
        assert all(w.startswith(want) for w, want in zip(shown, expect["warnings"], strict=True))


@pytest.mark.parametrize("case", case_params("after-steps"))
def test_after_steps(case: dict[str, Any]) -> None:
    vm = build_vm(case.get("vm", {}))
    p = build_plan(case["plan"], vm)
    if "busy" in case:
        got = outcomes.busy(p, case["busy"]["waited_s"])
    else:
        a = case["after"]
        why = None if a["stop"] is None else outcomes.Stop(*a["stop"])
        after = VmState(a["observed_mib"] * MiB)
        done = build_steps(a["done"], vm.total)
        got = outcomes.after_steps(p, after, done, why, a["deferrals"])
    check_outcome(got, case["expect"]["outcome"])


@pytest.mark.parametrize("case", case_params("step-stopped"))
def test_step_stopped(case: dict[str, Any]) -> None:
    s = case["stopped"]
    state, detail = s["progress"]
    stop = outcomes.step_stopped(
        build_steps([s["step"]], 0)[0],
        StepProgress(state, detail),
        s["pressure"],
        timeout_s=s["timeout_s"],
        observed=s["observed_mib"] * MiB,
    )
    want = case["expect"]["stop"]
    assert (stop.status, stop.reason) == (want["status"], want["reason"]), stop
    assert want["message"] in stop.message, stop.message


#: A configuration (make_config's keys) and a VM (None: the one Kata boots) whose grow the
#: plan stops where the VM is, by the clamp's cause, and the outcome's reason for it.
STOPS: dict[str, tuple[dict[str, Any], Optional[VmState], str, str]] = {
    # A small guest onlining to a kernel zone (Kata's own, kata-mem's default) whose
    # headroom leaves no room for one more block's struct pages.
    "guest-memmap-dimm": (
        {"default_memory": 256, "kata_mem": {"headroom_min_mib": 200}},
        None,
        "guest_memmap",
        "NoMemmapRoom",
    ),
    "guest-memmap-virtio-mem": (
        {"default_memory": 256, "enable_virtio_mem": True, "kata_mem": {"headroom_min_mib": 200}},
        None,
        "guest_memmap",
        "NoMemmapRoom",
    ),
    "slots": (
        {"default_memory": 256, "memory_slots": 1},
        VmState(256 * MiB, (MemoryDevice("other", "dimm", 128 * MiB, slot=0),), 1),
        "slots",
        "NoFreeSlots",
    ),
    "device-space": (
        {"default_memory": 256},
        VmState(256 * MiB, (), 8, 0),
        "device_space",
        "NoDeviceSpace",
    ),
}


@pytest.mark.parametrize("stop", list(STOPS.values()), ids=list(STOPS))
def test_a_grow_stopped_where_the_vm_is_is_answered_with_the_plans_cause(
    make_config: Callable[..., SizingConfig],
    stop: tuple[dict[str, Any], Optional[VmState], str, str],
) -> None:
    """The real planner's stops and the outcome agree: a small kernel-onlining guest was
    stopped by the plan with ``guest_memmap`` and the apply answered ``NoDeviceSpace``
    (issue 33, item 13). Each cause that stops a grow where the VM is has its reason, and
    the outcome says what the plan says."""
    keys, given, cause, reason = stop
    cfg = make_config(**keys)
    host = HostFacts(memory=16 * GiB, cpus=8, arch="amd64")
    work = Workload((Container("c", memory_limit=GiB),))
    vm = given or assumed_vm(cfg, host, None, work)
    p = plan(cfg, host, work, vm)
    (clamp,) = [c for c in p.memory.clamps if c.cause == cause]
    assert p.memory.steps == () and clamp.limit == vm.total
    _, outcome = outcomes.before_steps(p, vm, shrink_allowed=False)
    assert outcome is not None
    assert (outcome.status, outcome.reason) == ("Infeasible", reason)
    assert outcome.message.startswith(clamp.detail), outcome.message
