"""Carry out a plan on a backend: reconcile, then step, verify, and record.

The only sequencer of side effects. Under the sandbox lock it

1. reconciles the intent record with the hypervisor (the truth): deletes
   orphaned backend objects, settles DIMMs whose unplug was pending, raises any
   virtio-mem ``requested-size`` left below the plugged size by a crash;
2. plans from the observed VM (so re-running the same input is a no-op);
3. runs the steps one at a time: shrink steps only after the safety check
   (:mod:`kata_mem.safety`) with fresh guest usage; the record is written
   before each command and updated with the observed result after it; each
   step is waited for (``step_timeout_s``) and verified from the hypervisor;
4. on a timeout, refusal or guest pressure it stops, reverts what can be
   reverted, and reports the outcome in KEP-1287's vocabulary.
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from kata_mem import safety
from kata_mem.backends import Backend, StepProgress
from kata_mem.errors import BackendError, BackendUnsupported, KataMemError
from kata_mem.journal import LOCK_WAIT_S, Record, SandboxState
from kata_mem.logs import get_logger
from kata_mem.model import (
    GuestUsage,
    HostFacts,
    Outcome,
    Plan,
    Reason,
    SizingConfig,
    Status,
    Step,
    VmState,
    Workload,
)
from kata_mem.planner import assumed_vm
from kata_mem.planner import plan as make_plan
from kata_mem.units import MiB, fmt_bytes

log = get_logger(__name__)

#: Longest a poll waits for news from the hypervisor before the executor looks again.
POLL_WAIT_S = 0.25
#: Deferred shrinks are retried after this, doubling per attempt, up to the cap.
BACKOFF_START_S = 30.0
BACKOFF_MAX_S = 300.0


@dataclass(frozen=True)
class Options:
    """What the caller allows: shrinking, and (tests only) skipping its checks."""

    allow_shrink: bool = False
    force: bool = False


@dataclass(frozen=True)
class Result:
    """The plan made from the observed VM, what came of it, and the warnings."""

    plan: Plan
    outcome: Outcome
    warnings: tuple[str, ...] = ()


class _Stop(Exception):
    """Ends the step loop with an outcome."""

    def __init__(self, status: Status, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def _crashpoint(name: str) -> None:
    # Fault injection for the crash tests: die exactly here, as a kill -9 would.
    if os.environ.get("KATA_MEM_CRASH_AT") == name:
        os._exit(99)


def run_locked(
    state: SandboxState,
    connect: Callable[[], Backend],
    cfg: SizingConfig,
    host: HostFacts,
    request: Workload,
    options: Options,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    saved_request: Optional[dict[str, Any]] = None,
) -> Result:
    """Take the sandbox lock, *then* connect (QEMU serves one monitor client at a
    time), apply, and close. A call that cannot get the lock in ``LOCK_WAIT_S``
    is Deferred/Busy and changes nothing: that one wait is the only one.

    Still under the lock, a call that never got as far as writing the journal
    (it never reached the VM) removes the sandbox's state again; any other saves
    ``saved_request``, what ``kata-mem reconcile`` re-runs later (a deferred
    shrink, a pending unplug, or finding that the VM is gone), also after a call
    that failed midway.

    :raises BackendUnavailable: the hypervisor cannot be reached.
    :raises ConfigError: the state directory is not kata-mem's or cannot be written.
    """
    with state.locked(LOCK_WAIT_S) as got:
        if not got:
            record = state.load()
            current = record.observed_mib * MiB if record.observed_mib else None
            p = make_plan(cfg, host, request, assumed_vm(cfg, host, current))
            busy = Outcome(
                "Deferred",
                "Busy",
                f"another resize of this sandbox is running (waited {LOCK_WAIT_S:g} s for its lock)",
                p.memory.current,
                p.memory.target,
                (),
                1.0,
            )
            return Result(p, busy)
        try:
            backend = connect()
            try:
                return Executor(backend, state, clock, sleep).apply(cfg, host, request, options)
            finally:
                backend.close()
        finally:
            if not state.path.is_file():
                state.clear()
            elif saved_request is not None:
                state.save_request(saved_request)


def fresh_usage(
    backend: Backend,
    interval_s: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    after: Optional[float] = None,
) -> Optional[GuestUsage]:
    """A balloon reading taken at or after ``after`` (default: now).

    QEMU stamps readings in whole seconds and the guest reports every
    ``interval_s``, so this waits up to about two intervals; if no such reading
    comes, the last one is returned, however old (the safety check then calls
    its age unknown).
    """
    not_before = clock() if after is None else after
    deadline = clock() + 3 * interval_s + 2.0
    usage = backend.guest_usage()
    while usage is not None and (usage.last_update or 0) < not_before and clock() < deadline:
        sleep(0.1)
        usage = backend.guest_usage()
    return usage


#: How to allow a shrink, in each interface's own words.
ALLOW_SHRINK_HOW = (
    "allow it with --allow-shrink (kata-mem apply and preview), allow_shrink: true (shim "
    "request), or [kata_mem] allow_shrink = true (configuration)"
)


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
    if allowed or m.mechanism == "static" or max(m.aligned, vm.base) >= vm.total:
        return p, None
    whole = ""
    if m.mechanism == "pc-dimm" and m.target >= vm.total:
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
    warnings = tuple(w for w in p.warnings if not w.startswith("shrink planned:"))
    return (
        dataclasses.replace(
            p,
            memory=dataclasses.replace(m, steps=()),
            warnings=(*warnings, f"ShrinkNotAllowed: {message}"),
        ),
        message,
    )


def _backend_text(exc: BackendError) -> str:
    """A backend's error with its error class, which the QMP and libvirt backends put
    in the message themselves; added here for any backend that does not."""
    if exc.error_class and exc.error_class not in exc.message:
        return f"{exc.error_class}: {exc.message}"
    return exc.message


def _cannot_shrink(vm: VmState, target: int) -> str:
    """Why no whole DIMM can go: there is none of kata-mem's, or each is too large."""
    excess = fmt_bytes(vm.total - target)
    ours = [d for d in vm.dimms if d.ours and not d.pending_unplug]
    if not ours:
        return (
            f"{excess} cannot be removed: kata-mem unplugs only DIMMs it plugged itself "
            f"(kmdimm<N>), and this VM has none; the guest stays at {fmt_bytes(vm.total)}"
        )
    sizes = ", ".join(f"{d.id} {fmt_bytes(d.size)}" for d in ours)
    return (
        f"{excess} cannot be removed: kata-mem unplugs whole DIMMs only, and each of its DIMMs "
        f"({sizes}) is larger than that; the guest stays at {fmt_bytes(vm.total)}"
    )


def backoff(attempts: int) -> float:
    return float(min(BACKOFF_START_S * 2 ** max(attempts - 1, 0), BACKOFF_MAX_S))


class Executor:
    """Applies plans for one sandbox on one backend."""

    def __init__(
        self,
        backend: Backend,
        state: SandboxState,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.backend = backend
        self.state = state
        self.clock = clock
        self.sleep = sleep
        self.warnings: list[str] = []
        # The end time and the VM total before the last shrink step, to judge how old a
        # balloon reading is relative to it (QEMU stamps readings in whole seconds).
        self._last_end: Optional[float] = None
        self._total_before_last = 0
        self._started = clock()

    # -- entry point -----------------------------------------------------------

    def apply(
        self, cfg: SizingConfig, host: HostFacts, request: Workload, options: Options
    ) -> Result:
        """Reconcile, plan from the observed VM, and run the plan. Call it with the
        sandbox lock held (:func:`run_locked`).

        :raises BackendUnavailable: the hypervisor cannot be reached (nothing planned).
        :raises ConfigError: the state directory cannot be written (nothing changed).
        """
        self._started = self.clock()
        record = self.state.load()
        vm = self.reconcile(record, cfg)
        p, refused = refuse_shrink(
            make_plan(cfg, host, request, vm),
            vm,
            options.allow_shrink or options.force or cfg.settings.allow_shrink,
        )
        if refused is not None:
            outcome = Outcome("Infeasible", "ShrinkNotAllowed", refused, vm.total, p.memory.target)
        else:
            outcome = self._run(p, vm, record, cfg, options)
        self._finish(record, outcome)
        return Result(p, outcome, tuple(self.state.warnings + self.warnings))

    # -- reconcile ---------------------------------------------------------------

    def reconcile(self, record: Record, cfg: SizingConfig) -> VmState:
        """Make the record match the hypervisor, and repair what a crash left.

        Returns the observed VM, with DIMMs whose unplug is pending marked so.
        """
        vm = self.backend.observe()
        if record.state == "running" and record.step:
            step = record.step
            self._note(
                "reconciled: the previous call stopped during "
                f"{step.get('action') or 'a step'} {step.get('device') or ''} "
                f"({record.phase or 'phase unknown'})"
            )
            device = str(step.get("device"))
            if (
                step.get("action") == "unplug_dimm"
                and record.phase == "issued"
                and vm.device(device)
            ):
                record.pending_unplug.append(device)
        repaired = False
        for memdev in vm.orphans:
            self._note(f"reconciled: deleting orphaned backend object {memdev}")
            self.backend.release(memdev)
            repaired = True
        dev = vm.virtio_mem
        if dev is not None and dev.requested < dev.size:
            # Left below the plugged size (a crash or timeout mid-shrink): the guest would keep
            # unplugging on its own, invisibly. Raise it to what is plugged.
            self._note(
                f"reconciled: {dev.id} requested-size raised from {fmt_bytes(dev.requested)} to {fmt_bytes(dev.size)}"
            )
            raise_step = Step("resize_virtio_mem", dev.id, dev.size, 0, vm.total)
            self._write(record, "running", raise_step, "intent")
            self.backend.begin(raise_step)
            repaired = True
        if repaired:
            vm = self.backend.observe()
        pending = [d for d in record.pending_unplug if vm.device(d) is not None]
        for gone in sorted(set(record.pending_unplug) - set(pending)):
            self._note(f"reconciled: pending unplug of {gone} completed")
        if repaired or record.state != "idle" or pending != record.pending_unplug:
            record.pending_unplug = pending
            record.state, record.step, record.phase = "idle", None, ""
            record.observed_mib = vm.total // MiB
            self.state.save(record)
        if pending:
            vm = dataclasses.replace(
                vm,
                devices=tuple(
                    dataclasses.replace(d, pending_unplug=True) if d.id in pending else d
                    for d in vm.devices
                ),
            )
        return vm

    # -- the step loop ---------------------------------------------------------------

    def _run(
        self, p: Plan, vm: VmState, record: Record, cfg: SizingConfig, options: Options
    ) -> Outcome:
        m = p.memory
        done: list[Step] = []
        if m.aligned < vm.total and any(d.pending_unplug for d in vm.devices):
            return Outcome(
                "Deferred",
                "Busy",
                "a DIMM unplug is still pending in the guest",
                vm.total,
                m.target,
                (),
                5.0,
            )
        if not m.steps:
            return self._no_steps(p, vm)
        baseline: Optional[GuestUsage] = None
        if m.shrink and not options.force:
            verdict, baseline = self._check(vm, m.target, cfg, m.block, None)
            if verdict.action == "defer":
                return self._deferred(record, verdict.reason, verdict.message, vm, m.target)
        if options.force:
            self._note("--force: shrink safety checks skipped (for tests and benchmarks only)")
        try:
            for step in m.steps:
                vm = self._step(step, vm, record, cfg, options, baseline, m.target)
                done.append(step)
        except _Stop as stop:
            if (
                done
                and stop.status == "Deferred"
                and done[-1].action == "resize_virtio_mem"
                and done[-1].shrinks
            ):
                self._relieve(done[-1], vm, record, cfg)
            vm = self._observe_safely(vm)
            if done and stop.status == "Deferred" and m.shrink:
                return Outcome(
                    "InProgress",
                    "PartialShrink",
                    f"stopped after {len(done)} step(s): {stop.message}",
                    vm.total,
                    m.target,
                    tuple(done),
                )
            if stop.status == "Deferred":
                return self._deferred(record, stop.reason, stop.message, vm, m.target, tuple(done))
            return Outcome(stop.status, stop.reason, stop.message, vm.total, m.target, tuple(done))
        if vm.total != m.target:
            return Outcome(
                "InProgress",
                "PartialShrink" if m.shrink else "BackendError",
                f"the hypervisor reports {fmt_bytes(vm.total)}, not the target {fmt_bytes(m.target)}",
                vm.total,
                m.target,
                tuple(done),
            )
        record.deferred = None
        return Outcome(
            "Resized",
            "",
            f"guest memory {fmt_bytes(vm.total)} (verified)",
            vm.total,
            m.target,
            tuple(done),
        )

    def _step(
        self,
        step: Step,
        vm: VmState,
        record: Record,
        cfg: SizingConfig,
        options: Options,
        baseline: Optional[GuestUsage],
        final_total: int,
    ) -> VmState:
        block = (
            vm.virtio_mem.block
            if step.action == "resize_virtio_mem" and vm.virtio_mem
            else cfg.settings.dimm_block
        )
        if step.shrinks and not options.force:
            verdict, _ = self._check(vm, step.total_after, cfg, block, baseline)
            if verdict.action == "defer":
                raise _Stop("Deferred", verdict.reason, verdict.message)
        before = vm
        self._write(record, "running", step, "intent")
        _crashpoint("before-command")
        try:
            self.backend.begin(step)
        except BackendUnsupported as exc:
            reason: Reason = "BackendCannotShrink" if step.shrinks else "BackendCannotGrow"
            raise _Stop(
                "Infeasible", reason, f"{step.action} {step.device}: {_backend_text(exc)}"
            ) from None
        except BackendError as exc:
            raise _Stop(
                "InProgress",
                "BackendError",
                f"{step.action} {step.device}: {_backend_text(exc)}",
            ) from None
        if step.action == "unplug_dimm":
            # Only an unplug needs this on disk: after a crash it tells "maybe pending" from "never sent".
            self._write(record, "running", step, "issued")
        _crashpoint("after-command")
        progress = self._wait(step, cfg, options, block)
        vm = self.backend.observe()
        guarded = step.shrinks and step.action == "resize_virtio_mem" and not options.force
        if progress.state == "done":
            log.info(
                "step %s %s done: guest memory %s", step.action, step.device, fmt_bytes(vm.total)
            )
            if guarded:
                self._last_end, self._total_before_last = self.clock(), before.total
                # After the last step, wait for a reading that shows it; between steps the
                # next step's check reads again anyway.
                last = step.total_after == final_total
                usage = (
                    self._fresh_usage(cfg, after=self._last_end)
                    if last
                    else self.backend.guest_usage()
                )
                pressure = safety.under_pressure(usage, cfg.settings, block)
                if pressure:
                    progress = StepProgress("pending", f"pressure: {pressure}")
            if progress.state == "done":
                return vm
        # Not done: decide what to keep, what to revert, and how to report it.
        if step.action == "unplug_dimm":
            if progress.state == "rejected":
                raise _Stop(
                    "InProgress",
                    "UnplugRejected",
                    f"the guest refused to release {step.device} ({progress.detail})",
                )
            record.pending_unplug.append(step.device)
            self.state.save(record)
            raise _Stop(
                "InProgress",
                "UnplugTimeout",
                f"{step.device}: no DEVICE_DELETED within {cfg.settings.step_timeout_s:g} s; it stays counted as "
                "plugged and pending, and is settled on a later call",
            )
        dev = vm.device(step.device)
        prior = before.device(step.device)
        pressure_text = (
            progress.detail.removeprefix("pressure: ")
            if progress.detail.startswith("pressure: ")
            else ""
        )
        if step.shrinks and dev is not None and prior is not None:
            # Under pressure, give back what the step took; otherwise stop where the guest got to,
            # so the driver does not go on unplugging by itself after we have given up.
            self._revert(step, prior.size if pressure_text else dev.size, vm, record)
            vm = self.backend.observe()
        if pressure_text:
            raise _Stop("Deferred", "GuestPressure", f"{pressure_text}; the step was reverted")
        timeout = f"{cfg.settings.step_timeout_s:g} s"
        if step.shrinks:
            raise _Stop(
                "InProgress",
                "UnplugTimeout",
                f"{step.device}: the guest did not release the memory within {timeout} ({progress.detail}); "
                f"stopped at {fmt_bytes(vm.total)}",
            )
        raise _Stop(
            "InProgress",
            "PlugTimeout",
            f"{step.device}: the guest did not confirm within {timeout} ({progress.detail}); "
            f"the hypervisor reports {fmt_bytes(vm.total)}",
        )

    def _wait(self, step: Step, cfg: SizingConfig, options: Options, block: int) -> StepProgress:
        deadline = self.clock() + cfg.settings.step_timeout_s
        next_check = self.clock() + 1.0
        progress = StepProgress("pending")
        while True:
            try:
                progress = self.backend.poll(
                    step, max(min(POLL_WAIT_S, deadline - self.clock()), 0.0)
                )
            except BackendError as exc:
                return StepProgress("rejected", _backend_text(exc))
            if progress.state != "pending":
                return progress
            now = self.clock()
            if (
                step.shrinks
                and step.action == "resize_virtio_mem"
                and not options.force
                and now >= next_check
            ):
                next_check = now + 1.0
                reason = safety.under_pressure(self.backend.guest_usage(), cfg.settings, block)
                if reason:
                    return StepProgress("pending", f"pressure: {reason}")
            if now >= deadline:
                return progress

    def _revert(self, step: Step, size: int, vm: VmState, record: Record) -> None:
        revert = Step("resize_virtio_mem", step.device, size, 0, vm.total)
        self._note(f"reverting {step.device} requested-size to {fmt_bytes(size)}")
        self._write(record, "running", revert, "intent")
        self.backend.begin(revert)
        deadline = self.clock() + 5.0
        while self.backend.poll(revert, POLL_WAIT_S).state == "pending" and self.clock() < deadline:
            pass

    def _fresh_usage(
        self, cfg: SizingConfig, after: Optional[float] = None
    ) -> Optional[GuestUsage]:
        return fresh_usage(
            self.backend, cfg.settings.stats_interval_s, self.clock, self.sleep, after
        )

    def _recent_usage(self, cfg: SizingConfig) -> Optional[GuestUsage]:
        """The latest reading when it is recent enough, else a fresh one."""
        usage = self.backend.guest_usage()
        if usage is None or usage.age is None or usage.age > cfg.settings.usage_max_age_s:
            usage = self._fresh_usage(cfg)
        return usage

    def _check(
        self,
        vm: VmState,
        after_total: int,
        cfg: SizingConfig,
        block: int,
        baseline: Optional[GuestUsage],
    ) -> tuple[safety.Verdict, Optional[GuestUsage]]:
        """The safety check for shrinking to ``after_total``, waiting only when it must.

        The latest reading is used if it is recent. One that may predate the
        previous step is judged as if it did (the VM then had more memory, so more
        counts as removed: the conservative side). A shrink is deferred only on a
        reading taken during this call and after the previous step: if the quick
        judgement says defer on an older one, a fresh reading is awaited first.
        """
        usage = self._recent_usage(cfg)
        since = self._last_end if self._last_end is not None else self._started
        stale = usage is not None and (usage.last_update or 0) < since
        ambiguous = stale and self._last_end is not None
        current = self._total_before_last if ambiguous else vm.total

        def judge(u: Optional[GuestUsage], total: int) -> safety.Verdict:
            return safety.check_step(
                current_total=total,
                after_total=after_total,
                usage=u,
                settings=cfg.settings,
                block=block,
                baseline=baseline,
            )

        verdict = judge(usage, current)
        if verdict.action == "defer" and stale:
            usage = self._fresh_usage(cfg, after=since)
            verdict = judge(usage, vm.total)
        return verdict, usage

    def _relieve(self, last: Step, vm: VmState, record: Record, cfg: SizingConfig) -> None:
        """Stopping mid-shrink: if the guest is now short of memory, give back the last step."""
        pressure = safety.under_pressure(
            self._fresh_usage(cfg, after=self._last_end),
            cfg.settings,
            vm.virtio_mem.block if vm.virtio_mem else 0,
        )
        if pressure:
            self._note(f"{pressure}: the last step is given back")
            self._revert(last, last.size - last.delta, vm, record)

    # -- outcomes and records ---------------------------------------------------------

    def _no_steps(self, p: Plan, vm: VmState) -> Outcome:
        m = p.memory
        causes = {c.cause for c in m.clamps}
        if m.mechanism == "static":
            return Outcome(
                "NoChange",
                "",
                "static sizing: the VM is sized at boot, nothing is hotplugged",
                vm.total,
                m.target,
            )
        if m.aligned > vm.total:
            if "slots" in causes:
                return Outcome(
                    "Infeasible",
                    "NoFreeSlots",
                    f"no free DIMM slot: the guest stays at {fmt_bytes(vm.total)}",
                    vm.total,
                    m.target,
                )
            return Outcome(
                "Infeasible",
                "NoDeviceSpace",
                f"no hotplug space left: the guest stays at {fmt_bytes(vm.total)}",
                vm.total,
                m.target,
            )
        if m.aligned < vm.total:
            if m.requested < vm.base:
                return Outcome(
                    "Infeasible",
                    "BelowBaseMemory",
                    f"the target is below the boot memory {fmt_bytes(vm.base)}",
                    vm.total,
                    m.target,
                )
            return Outcome(
                "Infeasible",
                "BackendCannotShrink",
                _cannot_shrink(vm, m.aligned),
                vm.total,
                m.target,
            )
        clamped = f" (clamped: {', '.join(c.cause for c in m.clamps)})" if m.clamps else ""
        return Outcome(
            "NoChange",
            "",
            f"already at the target {fmt_bytes(vm.total)}{clamped}",
            vm.total,
            m.target,
        )

    def _deferred(
        self,
        record: Record,
        reason: Reason,
        message: str,
        vm: VmState,
        target: int,
        done: tuple[Step, ...] = (),
    ) -> Outcome:
        attempts = int((record.deferred or {}).get("attempts", 0)) + 1
        wait = backoff(attempts)
        record.deferred = {
            "reason": reason,
            "attempts": attempts,
            "retry_at": self.clock() + wait,
            "target_mib": target // MiB,
        }
        return Outcome("Deferred", reason, message, vm.total, target, done, wait)

    def _finish(self, record: Record, outcome: Outcome) -> None:
        record.state, record.step, record.phase = "idle", None, ""
        record.observed_mib = outcome.observed // MiB
        if outcome.status != "Deferred":
            record.deferred = None
        record.last_outcome = {
            "status": outcome.status,
            "reason": outcome.reason,
            "message": outcome.message,
            "at": self.clock(),
        }
        self.state.save(record)

    def _write(self, record: Record, state: str, step: Step, phase: str) -> None:
        record.state, record.phase = state, phase
        record.step = {
            "action": step.action,
            "device": step.device,
            "size": step.size,
            "delta": step.delta,
        }
        self.state.save(record)

    def _observe_safely(self, vm: VmState) -> VmState:
        try:
            return self.backend.observe()
        except KataMemError:
            return vm

    def _note(self, text: str) -> None:
        log.warning("%s", text)
        self.warnings.append(text)
