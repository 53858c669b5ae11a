"""What an ``apply`` comes to, in KEP-1287's vocabulary (docs, "Outcomes"). Pure.

The executor asks three questions here and does what the answers say:

- :func:`before_steps`: is there anything to run? (shrinking off, DIMMs the guest
  cannot be relied on to give back, a DIMM unplug still pending, nothing to do or nothing
  that can be done);
- :func:`step_stopped`: a step could not be completed: what stops the run;
- :func:`after_steps`: what the steps that ran, and what stopped them, add up to.

Every status and reason code is decided in this module, and each branch has a
case in ``tests/fixtures/outcome-cases/``.
"""

from __future__ import annotations

import math
from typing import Optional

from kata_mem.core.frozen import frozen, replace
from kata_mem.core.guestmem import kernel_zone_dimms, kernel_zone_text
from kata_mem.core.model import (
    Cause,
    Note,
    Outcome,
    Plan,
    Reason,
    Status,
    Step,
    VmState,
)
from kata_mem.core.reports import StepProgress
from kata_mem.core.units import fmt_bytes

#: Deferred shrinks are retried after this, doubling per attempt, up to the cap.
BACKOFF_START_S = 30.0
BACKOFF_MAX_S = 300.0
#: How soon to retry while a DIMM unplug is still pending in the guest.
PENDING_RETRY_S = 5.0
#: How soon to retry after waiting in vain for another call's lock.
BUSY_RETRY_S = 1.0

#: How to allow a shrink, in each interface's own words.
ALLOW_SHRINK_HOW = (
    "allow it with --allow-shrink (kata-mem apply and preview), allow_shrink: true (shim "
    "request), or [kata_mem] allow_shrink = true (configuration)"
)


@frozen
class Stop:
    """Why the steps stopped before the target: a status, a reason code, a message."""

    status: Status
    reason: Reason
    message: str


def backoff(attempts: int) -> float:
    """Seconds until a shrink deferred ``attempts`` times in a row is retried: doubling
    from the start to the cap. The doublings are counted only up to the cap, so that no
    count (a shrink deferred for days, or a journal edited by hand) overflows or costs time."""
    doublings = max(attempts - 1, 0)
    cap = math.ceil(math.log2(BACKOFF_MAX_S / BACKOFF_START_S))
    return float(min(BACKOFF_START_S * 2 ** min(doublings, cap), BACKOFF_MAX_S))


def refuse_shrink(p: Plan, vm: VmState, allowed: bool) -> tuple[Plan, Optional[str]]:
    """The plan as ``apply`` carries it out when shrinking is off, and why.

    A target below what is plugged is kept where it is: the plan loses its
    (shrink) steps and carries a ``ShrinkNotAllowed`` note, and the message is
    returned. Otherwise the plan comes back unchanged with ``None``. Pure, so that
    ``preview`` shows exactly what ``apply`` does with the same flags.

    Refused before asking whether the shrink could be done at all: with shrinking
    off the answer is the same either way, and the flag is what the user can change.
    """
    m = p.memory
    if allowed or max(m.aligned, vm.base) >= vm.total:
        return p, None
    whole = ""
    if keep_kernel_zone_dimms(p, vm)[1] is not None:
        whole = " (even then, no DIMM would be unplugged: the guest onlined it to a kernel zone)"
    elif m.mechanism == "pc-dimm" and m.target >= vm.total:
        whole = (
            f" (even then, kata-mem unplugs whole DIMMs only, and none of its DIMMs fits in the "
            f"{fmt_bytes(vm.total - m.aligned)} to remove)"
        )
    elif m.mechanism == "pc-dimm" and m.target != m.aligned:
        whole = f" (whole DIMMs only: the shrink would reach {fmt_bytes(m.target)})"
    message = (
        f"the target {fmt_bytes(m.aligned)} is below the guest's {fmt_bytes(vm.total)}, and "
        f"shrinking is off: the guest keeps {fmt_bytes(vm.total)}. To shrink, "
        f"{ALLOW_SHRINK_HOW}{whole}"
    )
    notes = tuple(n for n in p.notes if n.code != "shrink_planned")
    return (
        replace(
            p,
            memory=replace(m, steps=()),
            notes=(*notes, Note("shrink_not_allowed", message)),
        ),
        message,
    )


def keep_kernel_zone_dimms(p: Plan, vm: VmState) -> tuple[Plan, Optional[str]]:
    """The plan as ``apply`` carries it out when it would unplug a DIMM the guest onlined
    to a kernel zone (:func:`~kata_mem.core.guestmem.kernel_zone_dimms`), and why.

    Such a DIMM often cannot be unplugged: the guest answers the eject busy and keeps the
    memory, and the unplug stays pending, holding every later shrink (measured on the test
    guest: docs, "Sizing rules", "pc-dimm shrink"). So no DIMM is unplugged: the plan loses its steps and carries a
    ``cannot_shrink`` note, and the message is returned, naming the onlining assumed and
    where it came from. Otherwise the plan comes back unchanged with ``None``. Pure, so
    that ``preview`` shows exactly what ``apply`` does."""
    m = p.memory
    unplugs = [s.device for s in m.steps if s.action == "unplug_dimm"]
    if m.guest_policy is None or not unplugs:
        return p, None
    kernel = kernel_zone_dimms(m.guest_policy, vm.base, vm.dimms)
    held = [d for d in unplugs if d in kernel]
    if not held:
        return p, None
    message = (
        f"{kernel_zone_text(m.guest_policy, held, vm.base)}; the guest keeps {fmt_bytes(vm.total)}"
    )
    notes = tuple(n for n in p.notes if n.code != "shrink_planned")
    return (
        replace(
            p,
            memory=replace(m, steps=()),
            notes=(*notes, Note("cannot_shrink", message)),
        ),
        message,
    )


def busy(p: Plan, waited_s: float) -> Outcome:
    """Another call held the sandbox's lock for all of ``waited_s``: nothing was done."""
    return Outcome(
        status="Deferred",
        reason="Busy",
        message=f"another resize of this sandbox is running (waited {waited_s:g} s for its lock)",
        observed=p.memory.current,
        target=p.memory.target,
        retry_after_s=BUSY_RETRY_S,
    )


def before_steps(p: Plan, vm: VmState, *, shrink_allowed: bool) -> tuple[Plan, Optional[Outcome]]:
    """The plan to carry out, and its outcome when there is nothing to run (else ``None``)."""
    p, refused = refuse_shrink(p, vm, shrink_allowed)
    m = p.memory
    if refused is not None:
        return p, Outcome(
            status="Infeasible",
            reason="ShrinkNotAllowed",
            message=refused,
            observed=vm.total,
            target=m.target,
        )
    p, kept = keep_kernel_zone_dimms(p, vm)
    if kept is not None:
        return p, Outcome(
            status="Infeasible",
            reason="BackendCannotShrink",
            message=kept,
            observed=vm.total,
            target=m.target,
        )
    if m.aligned < vm.total and any(d.pending_unplug for d in vm.devices):
        return p, Outcome(
            status="Deferred",
            reason="Busy",
            message="a DIMM unplug is still pending in the guest",
            observed=vm.total,
            target=m.target,
            retry_after_s=PENDING_RETRY_S,
        )
    if not m.steps:
        status, reason, message = _nothing_to_run(p, vm)
        return p, Outcome(
            status=status, reason=reason, message=message, observed=vm.total, target=m.target
        )
    return p, None


#: Why a grow the plan stopped where the VM is cannot be done, by the cause of the clamp
#: that stopped it (planner ``_grow_dimm``, ``_resize_virtio_mem``): the outcome names what
#: the plan names, one rule for both. The guest's own ceiling stops a staged grow (kernel
#: onlining, kata_mem.core.guestmem) when its kernel-zone memory, less the headroom, holds
#: the struct pages of no further block.
GROW_STOPPED: dict[Cause, Reason] = {
    "slots": "NoFreeSlots",
    "device_space": "NoDeviceSpace",
    "alignment": "BackendCannotGrow",  # a DIMM QEMU would place off a block
    "guest_memmap": "NoMemmapRoom",
}


def _nothing_to_run(p: Plan, vm: VmState) -> tuple[Status, Reason, str]:
    """No steps: at the target, or the target cannot be reached, and why."""
    m = p.memory
    stays = f"the guest stays at {fmt_bytes(vm.total)}"
    if m.mechanism == "virtio-mem" and vm.virtio_mem is None and m.aligned != vm.total:
        # No device that is the sandbox's (planner._resize_virtio_mem says why).
        reason: Reason = "BackendCannotGrow" if m.aligned > vm.total else "BackendCannotShrink"
        why = next((c.detail for c in m.clamps if c.cause == "device_space"), "")
        return "Infeasible", reason, f"{why}: {stays}"
    if m.aligned > vm.total:
        # The plan stopped the grow where the VM is: the clamp that stopped it, at the VM's
        # own size, is the reason (a rounding down never stops below the aligned target,
        # and a guard or a ceiling lowers the target itself: NoChange below).
        stop = next((c for c in m.clamps if c.cause in GROW_STOPPED and c.limit == vm.total), None)
        if stop is None:  # no cause the planner gives: nothing to name but the plan's
            return "Infeasible", "BackendCannotGrow", f"the plan adds nothing: {stays}"
        return "Infeasible", GROW_STOPPED[stop.cause], f"{stop.detail}: {stays}"
    if m.aligned < vm.total:
        if m.requested < vm.base:
            why = (
                ": Kata sized the VM at boot (static_sandbox_resource_mgmt), and boot memory "
                "cannot be given back"
                if m.static_sizing
                else ""
            )
            return (
                "Infeasible",
                "BelowBaseMemory",
                f"the target is below the boot memory {fmt_bytes(vm.base)}{why}; "
                f"the guest stays at {fmt_bytes(vm.total)}",
            )
        return "Infeasible", "BackendCannotShrink", _cannot_shrink(vm, m.aligned)
    clamped = f" (clamped: {', '.join(c.cause for c in m.clamps)})" if m.clamps else ""
    return "NoChange", "", f"already at the target {fmt_bytes(vm.total)}{clamped}"


def _cannot_shrink(vm: VmState, target: int) -> str:
    """Why no whole DIMM can go: there is none of kata-mem's, or each is too large."""
    excess = fmt_bytes(vm.total - target)
    ours = [d for d in vm.dimms if d.ours and not d.pending_unplug]
    if not ours:
        alike = f" ({', '.join(vm.unproven)} only look like kata-mem's)" if vm.unproven else ""
        return (
            f"{excess} cannot be removed: kata-mem unplugs only DIMMs its journal records it "
            f"plugged, and this VM has none{alike}; the guest stays at {fmt_bytes(vm.total)}"
        )
    sizes = ", ".join(f"{d.id} {fmt_bytes(d.size)}" for d in ours)
    return (
        f"{excess} cannot be removed: kata-mem unplugs whole DIMMs only, and each of its DIMMs "
        f"({sizes}) is larger than that; the guest stays at {fmt_bytes(vm.total)}"
    )


def step_stopped(
    step: Step,
    progress: StepProgress,
    pressure: Optional[str],
    *,
    timeout_s: float,
    observed: int,
) -> Stop:
    """Why the run stops at a step that did not complete: refused, timed out, or
    given back because the guest ran short (``pressure``); ``observed`` is the VM's
    memory after any revert."""
    timeout = f"{timeout_s:g} s"
    if step.action == "unplug_dimm":
        if progress.state == "rejected":
            return Stop(
                "InProgress",
                "UnplugRejected",
                f"the guest refused to release {step.device} ({progress.detail})",
            )
        return Stop(
            "InProgress",
            "UnplugTimeout",
            f"{step.device}: no DEVICE_DELETED within {timeout}; it stays counted as "
            "plugged and pending, and is settled on a later call",
        )
    if pressure:
        return Stop("Deferred", "GuestPressure", f"{pressure}; the step was reverted")
    if step.shrinks:
        return Stop(
            "InProgress",
            "UnplugTimeout",
            f"{step.device}: the guest did not release the memory within {timeout} "
            f"({progress.detail}); stopped at {fmt_bytes(observed)}",
        )
    return Stop(
        "InProgress",
        "PlugTimeout",
        f"{step.device}: the guest did not confirm within {timeout} ({progress.detail}); "
        f"the hypervisor reports {fmt_bytes(observed)}",
    )


def after_steps(
    p: Plan, vm: VmState, done: tuple[Step, ...], stop: Optional[Stop], deferrals: int
) -> Outcome:
    """What the run came to: ``done`` are the steps completed, ``stop`` why the run
    ended early (``None`` when every step ran), ``vm`` the VM observed after it, and
    ``deferrals`` how often this shrink was deferred before (for the backoff)."""
    m = p.memory
    if stop is None and vm.total == m.target:
        return Outcome(
            status="Resized",
            reason="",
            message=f"guest memory {fmt_bytes(vm.total)} (verified)",
            observed=vm.total,
            target=m.target,
            steps=done,
        )
    if stop is None:
        return Outcome(
            status="InProgress",
            reason="PartialShrink" if m.shrink else "BackendError",
            message=f"the hypervisor reports {fmt_bytes(vm.total)}, not the target "
            f"{fmt_bytes(m.target)}",
            observed=vm.total,
            target=m.target,
            steps=done,
        )
    if stop.status == "Deferred" and done and m.shrink:
        return Outcome(
            status="InProgress",
            reason="PartialShrink",
            message=f"stopped after {len(done)} step(s): {stop.message}",
            observed=vm.total,
            target=m.target,
            steps=done,
        )
    return Outcome(
        status=stop.status,
        reason=stop.reason,
        message=stop.message,
        observed=vm.total,
        target=m.target,
        steps=done,
        retry_after_s=backoff(deferrals + 1) if stop.status == "Deferred" else None,
    )
