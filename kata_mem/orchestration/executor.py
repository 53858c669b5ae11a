"""Carry out a plan on a backend: repair, then step, verify, and record.

The only sequencer of side effects. Under the sandbox lock it

1. repairs what a previous call left half done (:mod:`kata_mem.orchestration.repair`), with the
   hypervisor as the truth;
2. plans from the observed VM (so re-running the same input is a no-op) and asks
   :mod:`kata_mem.core.outcomes` whether there is anything to run;
3. runs the steps one at a time: shrink steps only after the safety check on
   fresh guest usage (:class:`~kata_mem.orchestration.usage.UsageReader`); the record is written
   before each command and updated with the observed result after it; each step
   is waited for (``step_timeout_s``) and verified from the hypervisor;
4. on a timeout, refusal or guest pressure it stops, reverts what can be
   reverted, and reports what :mod:`kata_mem.core.outcomes` makes of it.

One module (about 740 lines) because the step loop, its waits, its reverts and its records
share the one state of an apply: the record as last written, the grow being verified in
the guest, the notes. What does not share it is out: repairing a previous call
(:mod:`~kata_mem.orchestration.repair`), reading the guest's usage
(:mod:`~kata_mem.orchestration.usage`), the host side (:mod:`~kata_mem.orchestration.guards`),
and the decisions, which are pure (:mod:`kata_mem.core.outcomes`, :mod:`kata_mem.core.safety`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Optional, Union

from kata_mem.backends import Backend, StepProgress
from kata_mem.core import outcomes, podresize, safety
from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import BackendError, BackendUnsupported, InputError, KataMemError
from kata_mem.core.guestmem import ceiling_at, grow_timeout_s, shows_grow
from kata_mem.core.model import (
    Arch,
    Guards,
    GuestUsage,
    HostFacts,
    Note,
    Outcome,
    OwnedDevice,
    Plan,
    Reason,
    SizingConfig,
    Step,
    VmState,
    Workload,
)
from kata_mem.core.outcomes import Stop
from kata_mem.core.plan import plan as make_plan
from kata_mem.core.plan.geometry import assumed_vm
from kata_mem.core.plan.guards import level_room
from kata_mem.core.record import PendingGrow, Phase, Record
from kata_mem.core.reports import owned_view, still_owned
from kata_mem.core.request import SandboxRequest, VmOwner
from kata_mem.core.units import fmt_bytes
from kata_mem.core.values import Frozen, replace
from kata_mem.edges.host import mem_available
from kata_mem.edges.journal import SandboxState
from kata_mem.edges.journal import vm_owner as files_vm_owner
from kata_mem.edges.ledger import node_admission, record_commitment
from kata_mem.edges.logs import get_logger
from kata_mem.edges.statedir import LOCK_WAIT_S
from kata_mem.orchestration.connect import Opened
from kata_mem.orchestration.guards import HostSide
from kata_mem.orchestration.repair import repair
from kata_mem.orchestration.usage import UsageReader

log = get_logger(__name__)

#: Longest a poll waits for news from the hypervisor before the executor looks again.
POLL_WAIT_S = 0.25
#: How often the guest's usage is read while a shrink step is pending.
PRESSURE_EVERY_S = 1.0
#: How long a revert or a repair step is waited for.
SETTLE_S = 5.0


class Options(Frozen):
    """What the caller allows: shrinking, and (tests only) skipping its checks; and
    ``crash_at``, the crash tests' fault injection: the point of the step loop
    (``before-command``, ``after-command``) where the process dies as a kill -9 would
    (``KATA_MEM_CRASH_AT`` in the environment :func:`~kata_mem.orchestration.handle.handle`
    is given)."""

    allow_shrink: bool = False
    force: bool = False
    crash_at: Optional[str] = None


class _GrowWatch(Frozen):
    """What a grow is verified against in the guest: its MemTotal before the first step
    (``before``), the VM's total then (``start``), the architecture (struct pages)."""

    before: int
    start: int
    arch: Arch


class Result(Frozen):
    """The plan made from the observed VM, what came of it, and the call's notes."""

    plan: Plan
    outcome: Outcome
    notes: tuple[Note, ...] = ()


class _Stopped(Exception):
    """Ends the step loop; ``stop`` says why."""

    def __init__(self, stop: Stop) -> None:
        super().__init__(stop.message)
        self.stop = stop


def _crashpoint(name: str, crash_at: Optional[str]) -> None:
    # Fault injection for the crash tests (Options.crash_at): die exactly here, as a
    # kill -9 would, with no cleanup and no finally.
    if crash_at == name:
        os._exit(99)


def run_locked(
    state: SandboxState,
    connect: Callable[[], Union[Backend, Opened]],
    cfg: SizingConfig,
    host: HostFacts,
    workload: Workload,
    options: Options,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    saved_request: Optional[SandboxRequest] = None,
    host_side: Optional[HostSide] = None,
    vm_owner: Optional[VmOwner] = None,
) -> Result:
    """Take the sandbox lock, *then* connect (QEMU serves one monitor client at a
    time), apply, and close. A call that cannot get the lock in ``LOCK_WAIT_S``
    is Deferred/Busy and changes nothing: that one wait is the only one.

    Still under the lock, a call that never got as far as writing the journal
    (it never reached the VM) removes the sandbox's state again; any other saves
    ``saved_request``, what ``kata-mem reconcile`` re-runs later (a deferred
    shrink, a pending unplug, or finding that the VM is gone), also after a call
    that failed midway (a sandbox's first call saves it before its steps too, so that
    one killed midway leaves it); with the endpoint as ``connect`` reached it (an
    :class:`~kata_mem.orchestration.connect.Opened`: for QMP, the VMM it led to), so
    that a later call through it talks to that VMM only (a socket path may be bound again
    by another process once its VM is gone: :class:`~kata_mem.core.endpoint.VmmIdentity`).
    ``vm_owner``: who says which other sandbox sizes the VM a first request reached
    (None: :func:`~kata_mem.edges.journal.vm_owner`, from the files).

    :raises BackendUnavailable: the hypervisor cannot be reached.
    :raises ConfigError: the state directory is not kata-mem's or cannot be written.
    """
    with state.locked(LOCK_WAIT_S) as got:
        if not got:
            record, _ = state.load().bounded(host.memory)
            vm = assumed_vm(cfg, host, record.observed or None, workload)
            p = make_plan(cfg, host, workload, vm)
            return Result(p, outcomes.busy(p, LOCK_WAIT_S))
        reached: Optional[Endpoint] = None
        try:
            opened = connect()
            backend = opened.backend if isinstance(opened, Opened) else opened
            reached = opened.endpoint if isinstance(opened, Opened) else None
            try:
                if not state.request_path.is_file():
                    if reached is not None:
                        _check_vm_owner(state, reached, vm_owner or files_vm_owner)
                    if saved_request is not None:
                        # A sandbox's first call saves its request before its first journal
                        # write, not only after it: killed in between (kill -9, no finally),
                        # it left a journal of a step in flight that ``reconcile`` could
                        # neither repair nor find the VM of. Later calls keep the last request
                        # that completed until they complete (their shim asks again).
                        state.save_request(_reached(saved_request, reached).to_json())
                return Executor(backend, state, clock, sleep, options.crash_at).apply(
                    cfg, host, workload, options, host_side
                )
            finally:
                backend.close()
        finally:
            if not state.path.is_file():
                state.clear()
            elif saved_request is not None:
                state.save_request(_reached(saved_request, reached).to_json())


def _reached(request: SandboxRequest, reached: Optional[Endpoint]) -> SandboxRequest:
    """``request`` as saved: through the endpoint the call reached (for QMP, pinned to its VMM)."""
    return request if reached is None else replace(request, endpoint=reached)


def _check_vm_owner(state: SandboxState, reached: Endpoint, vm_owner: VmOwner) -> None:
    """Refuse a new sandbox's request whose VM another sandbox already owns (``vm_owner``:
    :func:`~kata_mem.edges.journal.vm_owner`, or ``kata-mem serve``'s node view), before
    anything is written or sent.

    :raises InputError: naming both sandboxes and the backend.
    """
    other = vm_owner(state.root, state.sandbox, reached)
    if other is not None:
        raise InputError(
            f"backend: {reached.describe()} leads to the VM of sandbox {other!r} (its saved "
            f"request), and this is the first request of sandbox {state.sandbox!r}: a VM is "
            f"sized from one sandbox's requests. Send it as sandbox {other!r}, or, if that "
            "sandbox is gone, forget it first (event delete)"
        )


def _step_timeout(cfg: SizingConfig, step: Step) -> float:
    """How long a step is waited for: ``step_timeout_s``, longer for a large grow."""
    return grow_timeout_s(cfg.settings, step.delta)


def _resize_shrink(step: Step) -> bool:
    return step.action == "resize_virtio_mem" and step.shrinks


class Executor:
    """Applies plans for one sandbox on one backend."""

    def __init__(
        self,
        backend: Backend,
        state: SandboxState,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        crash_at: Optional[str] = None,
    ) -> None:
        self.backend = backend
        self.state = state
        self.clock = clock
        self.sleep = sleep
        self.crash_at = crash_at
        self.notes: list[Note] = []
        #: The sandbox's record as last written (the executor's changes go through _save).
        self.record = Record(state.sandbox)
        #: The grow being verified in the guest, if any (:meth:`_run`).
        self._watch: Optional[_GrowWatch] = None

    def apply(
        self,
        cfg: SizingConfig,
        host: HostFacts,
        workload: Workload,
        options: Options,
        host_side: Optional[HostSide] = None,
    ) -> Result:
        """Repair, plan from the observed VM and the host side, and run the plan. Call
        it with the sandbox lock held (:func:`run_locked`).

        A grow is admitted under the node-wide lock: the other sandboxes' commitments
        are read, the plan made, and its target recorded before the lock is let go.

        :raises BackendUnavailable: the hypervisor cannot be reached (nothing planned).
        :raises ConfigError: the state directory cannot be written (nothing changed).
        :raises InputError: a host cgroup the caller named cannot be read (nothing changed).
        """
        reader = UsageReader(self.backend, cfg.settings, self.clock, self.sleep)
        loaded, dropped = self.state.load().bounded(host.memory)
        if dropped:
            self._note(Note("journal", f"journal {self.state.path}: {dropped}"))
        self.record = loaded
        held = loaded.commitment
        vm, self.record = repair(
            self.backend,
            self.state,
            loaded,
            self._settle,
            self._note,
            lambda step: self._wait(step, SETTLE_S)[0],
        )
        allowed = options.allow_shrink or options.force or cfg.settings.allow_shrink
        sandbox = self.state.sandbox
        # One reading for the plan's ceiling and the grow's starting point (:meth:`_run`).
        first = self._grow_reading(cfg, host, workload, vm, reader, options.force)
        available = None if first is None else first.available
        # The guest's statistics polling, which the shrink checks read: set here, by an
        # apply, never by connecting or reading, so that status, a dry run and reconcile's
        # presence checks leave the VM as they found it (kata_mem.backends.Backend). After
        # a grow's reading, whose ask (interval 0, then this one) has set it already where
        # readings are counted: then nothing is sent.
        self.backend.set_stats_interval(cfg.settings.stats_interval_s)
        budget = cfg.settings.node_overcommit is not None
        with node_admission(self.state.root, host.memory, budget) as ledger:
            if ledger is not None:
                ledger.hold_to(sandbox, self.record.commitment)
                held = self.record.commitment
                for note in ledger.notes:
                    self._note(note)
            guards = None
            if host_side is not None:
                guards = host_side.read(
                    vm, lambda: ledger.others(sandbox) if ledger else 0, mem_available
                )
            p, outcome = outcomes.before_steps(
                make_plan(cfg, host, workload, vm, guards, available),
                vm,
                shrink_allowed=allowed,
            )
            if outcome is None and p.memory.target > vm.total:
                admitted = self.record.admit(p.memory.target)
                # The ledger first: a crash leaves it counting the grow, never missing it.
                if ledger is not None:
                    ledger.record(sandbox, admitted.commitment)
                    held = admitted.commitment
                self._save(admitted)
        if outcome is not None and outcome.status == "NoChange" and not options.force:
            outcome = self._still_unconfirmed(loaded, outcome, reader)
        if outcome is None:
            outcome = self._run(p, vm, cfg, None if options.force else reader, host.arch, first)
        pending = None
        if guards is not None:
            if guards.pod_limit is not None and host_side is not None:
                outcome = self._for_pod(outcome, vm, cfg, guards, host_side)
            pending = self._held_back(p, cfg, host, workload, vm, guards, available)
        self._finish(outcome, pending)
        if self.record.commitment != held:
            # After the journal: the ledger falls only once the journal says it may.
            for note in record_commitment(
                self.state.root, sandbox, self.record.commitment, host.memory
            ):
                self._note(note)
        cgroup = p.memory.host_cgroup
        if host_side is not None and cgroup is not None and outcome.steps:
            after = replace(cgroup, usage_after=host_side.charge(cgroup))
            p = replace(p, memory=replace(p.memory, host_cgroup=after))
        return Result(p, outcome, (*self.state.notes, *self.notes))

    @staticmethod
    def _still_unconfirmed(loaded: Record, outcome: Outcome, reader: UsageReader) -> Outcome:
        """Nothing to change, after a call whose grow the guest did not confirm
        (``PlugTimeout``): the VM has the memory, so the guest must still answer, or it may
        have died adding it, and that is never exit 0. A guest without statistics cannot
        say either way and is taken at the hypervisor's word.

        A call killed between a grow step's command and the guest's confirmation left
        that step running in the journal: its grow was not confirmed either."""
        last = loaded.last_outcome
        timed_out = last is not None and (last.status, last.reason) == ("InProgress", "PlugTimeout")
        step = loaded.step
        killed = loaded.state == "running" and step is not None and step.delta > 0
        if not (timed_out or killed):
            return outcome
        if reader.latest() is None or reader.answers():
            return outcome
        return replace(
            outcome,
            status="InProgress",
            reason="PlugTimeout",
            message=f"{outcome.message}; but the guest has sent no memory statistics since "
            "its last grow was not confirmed: it may be down",
        )

    @staticmethod
    def _grow_reading(
        cfg: SizingConfig,
        host: HostFacts,
        workload: Workload,
        vm: VmState,
        reader: UsageReader,
        force: bool,
    ) -> Optional[GuestUsage]:
        """The guest's reading a grow is planned and measured from, read only when the plan
        grows: its MemAvailable bounds the guest's own ceiling (:mod:`kata_mem.core.guestmem`:
        the struct pages of what is added come from memory the guest has free now), and its
        MemTotal is what the grow is confirmed against (:meth:`_run`). Fresh, taken after the
        VM was observed, so that one reading serves both; with ``force`` (no confirmation) a
        recent one, for the ceiling only. None when the guest reports nothing (the ceiling
        is then estimated)."""
        m = make_plan(cfg, host, workload, vm).memory
        if m.target <= vm.total or (force and m.guest is None):
            return None
        return reader.recent() if force else reader.fresh()

    def _for_pod(
        self, outcome: Outcome, vm: VmState, cfg: SizingConfig, guards: Guards, host: HostSide
    ) -> Outcome:
        """The outcome as the answer to a new pod limit (:func:`podresize.settle`), with
        QEMU's charge read after the steps."""
        pod = guards.pod_limit
        assert pod is not None
        charge = host.charge_at(guards.cgroup, pod.path)
        if charge is None:
            self._note(
                Note(
                    "host_cgroup",
                    f"QEMU's charge in {pod.path} is unknown: only the VM's size was checked "
                    "against the new pod limit",
                )
            )
        settled = podresize.settle(
            outcome,
            before=vm.total,
            pod=pod,
            allowed=level_room(cfg, pod, vm.total),
            base=vm.base,
            charge=charge,
            margin=cfg.settings.host_cgroup_margin,
        )
        if settled.status == "Deferred" and outcome.status != "Deferred":
            retry_at = self.clock() + (settled.retry_after_s or 0.0)
            self.record = self.record.defer(settled.reason, retry_at, settled.target)
        return settled

    @staticmethod
    def _held_back(
        p: Plan,
        cfg: SizingConfig,
        host: HostFacts,
        workload: Workload,
        vm: VmState,
        guards: Guards,
        available: Optional[int] = None,
    ) -> Optional[PendingGrow]:
        """The grow the VMM's cgroup in force held back, if any: on a pod resize the
        kubelet raises the pod cgroup only after the runtime answered, and a later call
        (the next event, or the service's loop once it sees the limit change) grows on."""
        cgroup = guards.cgroup
        if cgroup is None or cgroup.limit is None or not cgroup.path:
            return None
        # The guest's own ceiling, read with the same reading, is no cgroup's doing.
        free = make_plan(
            cfg, host, workload, vm, replace(guards, cgroup=None), available
        ).memory.target
        if free <= p.memory.target:
            return None
        return PendingGrow(free, cgroup.path, cgroup.limit)

    # -- the step loop ---------------------------------------------------------------

    def _run(
        self,
        p: Plan,
        vm: VmState,
        cfg: SizingConfig,
        reader: Optional[UsageReader],
        arch: Arch = "amd64",
        first: Optional[GuestUsage] = None,
    ) -> Outcome:
        """Run the plan's steps; ``reader`` is None when the safety checks are off (--force).
        ``first``: a reading taken after ``vm`` was observed (:meth:`_grow_reading`)."""
        m = p.memory
        self._watch = None
        if reader is not None and not m.shrink and any(s.delta > 0 for s in m.steps):
            # A grow is done when the guest says so, not when the hypervisor has the device.
            # Against a reading taken after the VM was observed (the plan's own, or one taken
            # now): a recent one may still show memory a step just before took away (a DIMM
            # the guest let go of a moment ago, counted in its MemTotal), and no grow would
            # ever seem to reach it.
            before = first if first is not None else reader.fresh()
            if before is None or before.total is None:
                # No balloon statistics (no virtio-balloon, or a guest without the driver):
                # nothing to confirm with, so the hypervisor's word is all there is.
                log.info("the guest reports no memory statistics: the grow is not confirmed by it")
            else:
                self._watch = _GrowWatch(before.total, vm.total, arch)
        done: list[Step] = []
        stop: Optional[Stop] = None
        baseline: Optional[GuestUsage] = None
        if reader is None:
            self._note(
                Note(
                    "force", "--force: shrink safety checks skipped (for tests and benchmarks only)"
                )
            )
        elif m.shrink:
            # The whole shrink is checked first, as the kubelet does: skip, don't half-do.
            verdict, baseline = reader.check(vm, m.target, m.block, None)
            if verdict.action == "defer":
                stop = Stop("Deferred", verdict.reason, verdict.message)
        if stop is None:
            try:
                for i, step in enumerate(m.steps):
                    vm = self._step(step, vm, cfg, reader, baseline, m.target)
                    done.append(step)
                    if self._watch is not None and reader is not None and step.delta > 0:
                        following = m.steps[i + 1] if i + 1 < len(m.steps) else None
                        self._confirm_grow(step, following, p, cfg, reader, self._watch)
            except _Stopped as stopped:
                stop = stopped.stop
                relieved = (
                    stop.status == "Deferred"
                    and bool(done)
                    and reader is not None
                    and self._relieve(done[-1], vm, cfg, reader)
                )
                if relieved:
                    # Given back: the outcome must not count it as done.
                    done.pop()
                vm = self._observe_safely(vm)
        outcome = outcomes.after_steps(p, vm, tuple(done), stop, self.record.attempts)
        if outcome.status == "Deferred":
            retry_at = self.clock() + (outcome.retry_after_s or 0.0)
            self.record = self.record.defer(outcome.reason, retry_at, m.target)
        return outcome

    def _step(
        self,
        step: Step,
        vm: VmState,
        cfg: SizingConfig,
        reader: Optional[UsageReader],
        baseline: Optional[GuestUsage],
        final_total: int,
    ) -> VmState:
        """Run one step and verify it from the hypervisor; returns the VM after it.

        :raises _Stopped: the step was deferred, refused, timed out, or given back.
        """
        before = step.total_after - step.delta
        if vm.total != before:
            # The hypervisor, read after the previous step, no longer shows what this step
            # was planned from: another agent resizes the VM too (Kata's runtime hotplugs on
            # container create, start and update unless static_sandbox_resource_mgmt:
            # virtcontainers/sandbox.go, Sandbox.updateResources). Nothing more is done on a
            # VM changing under it; the next call plans from what the hypervisor shows.
            raise _Stopped(
                Stop(
                    "Deferred",
                    "Busy",
                    f"the VM's memory changed under kata-mem: {step.action} {step.device} was "
                    f"planned from {fmt_bytes(before)} and the hypervisor shows "
                    f'{fmt_bytes(vm.total)} (another agent resizes this VM: see "One owner of '
                    "each VM's memory\"); the next call plans from what it shows",
                )
            )
        resize = step.action == "resize_virtio_mem"
        block = vm.virtio_mem.block if resize and vm.virtio_mem else cfg.settings.dimm_block
        if step.shrinks and reader is not None:
            irreversible = step.action == "unplug_dimm"
            verdict, _ = reader.check(vm, step.total_after, block, baseline, irreversible)
            if verdict.action == "defer":
                raise _Stopped(Stop("Deferred", verdict.reason, verdict.message))
        self._issue(step)
        # A virtio-mem shrink is watched: the guest may run short while it gives memory back.
        watched = reader if _resize_shrink(step) else None
        progress, pressure = self._wait(
            step,
            _step_timeout(cfg, step),
            None if watched is None else lambda: self._pressure(watched.latest(), cfg, block),
        )
        if progress.state == "done" and step.delta > 0 and self._watch and reader is not None:
            # The guest's reading that will show the grow (:meth:`_confirm_grow`) is due now:
            # asked for before the step is verified, in one exchange with it where the
            # backend can.
            reader.look_now()
        after = self._observe()
        if progress.state == "done" and step.shrinks and reader is not None:
            # Also after a DIMM unplug: the next step's check must not take a reading from
            # before it for one after it.
            reader.step_done(vm.total)
        if progress.state == "done" and watched is not None:
            # After the last step, wait for a reading that shows it; between steps the
            # next step's check reads again anyway.
            last = step.total_after == final_total
            pressure = self._pressure(
                watched.since_last_step() if last else watched.latest(), cfg, block
            )
        if progress.state == "done" and not pressure:
            log.info(
                "step %s %s done: guest memory %s", step.action, step.device, fmt_bytes(after.total)
            )
            return after
        raise self._give_up(step, progress, pressure, vm, after, cfg)

    def _confirm_grow(
        self,
        step: Step,
        following: Optional[Step],
        p: Plan,
        cfg: SizingConfig,
        reader: UsageReader,
        watch: _GrowWatch,
    ) -> None:
        """Wait for the guest to show a grow step: a reading whose MemTotal has grown by
        what the steps so far added (:func:`~kata_mem.core.guestmem.shows_grow`) and,
        before a staged step, whose MemAvailable less the headroom describes that next
        step (:func:`~kata_mem.core.guestmem.ceiling_at`). A guest that does not (still
        onlining, or dead) stops the run: never Resized on the hypervisor's word alone.

        :raises _Stopped: no such reading within the step's timeout.
        """
        grown = step.total_after - watch.start
        guest = p.memory.guest
        timeout_s = _step_timeout(cfg, step)

        def ready(u: GuestUsage) -> bool:
            if u.total is None or not shows_grow(watch.before, u.total, grown, watch.arch):
                return False
            if following is None or following.delta <= 0 or guest is None:
                return True
            room = ceiling_at(
                guest.policy,
                cfg.settings,
                watch.arch,
                p.memory.base,
                step.total_after,
                u.available,
            )
            return room.addable >= following.delta

        usage = reader.until(ready, timeout_s)
        if usage is not None and ready(usage):
            return
        seen = (
            "no reading"
            if usage is None or usage.total is None
            else f"MemTotal {fmt_bytes(usage.total)} (before the grow {fmt_bytes(watch.before)})"
        )
        what = (
            f"the memory of {step.device} online"
            if usage is None
            or usage.total is None
            or not shows_grow(watch.before, usage.total, grown, watch.arch)
            else "room for the next step above the headroom (MemAvailable "
            f"{fmt_bytes(usage.available or 0)})"
        )
        raise _Stopped(
            Stop(
                "InProgress",
                "PlugTimeout",
                f"{step.device}: the guest did not show {what} within {timeout_s:g} s ({seen}): "
                "it may still be onlining (the next call goes on from what it has) or be down",
            )
        )

    def _issue(self, step: Step) -> None:
        """Journal the step, send its commands, and journal that they were sent.

        :raises _Stopped: the hypervisor refused the commands.
        """
        if step.action == "plug_dimm":
            # Recorded before the command: after a crash between object-add and device_add
            # this entry is what proves that the backend object is kata-mem's to delete.
            self.record = self.record.plugging(OwnedDevice(step.device, step.memdev, step.size))
        self._write(step, "intent")
        _crashpoint("before-command", self.crash_at)
        try:
            self.backend.begin(step)
        except BackendUnsupported as exc:
            reason: Reason = "BackendCannotShrink" if step.shrinks else "BackendCannotGrow"
            raise _Stopped(
                Stop("Infeasible", reason, f"{step.action} {step.device}: {exc.with_class}")
            ) from exc
        except BackendError as exc:
            raise _Stopped(
                Stop(
                    "InProgress",
                    "BackendError",
                    f"{step.action} {step.device}: {exc.with_class}",
                )
            ) from exc
        if step.action == "plug_dimm":
            self.record = self.record.plugged(step.device)
        if step.action in ("plug_dimm", "unplug_dimm"):
            # After a crash this tells an unplug "maybe pending" from "never sent", and a
            # plug's entry in ``owned`` accepted from merely intended.
            self._write(step, "issued")
        _crashpoint("after-command", self.crash_at)

    def _wait(
        self,
        step: Step,
        timeout_s: float,
        watch: Optional[Callable[[], Optional[str]]] = None,
    ) -> tuple[StepProgress, Optional[str]]:
        """Poll ``step`` until it is no longer pending or ``timeout_s`` has passed.

        ``watch``, asked about once a second while the step is pending, gives a reason
        to stop waiting early (guest pressure); it is returned with the progress.
        """
        deadline = self.clock() + timeout_s
        next_watch = self.clock() + PRESSURE_EVERY_S
        while True:
            try:
                wait_s = max(min(POLL_WAIT_S, deadline - self.clock()), 0.0)
                progress = self.backend.poll(step, wait_s)
            except BackendError as exc:
                return StepProgress("rejected", exc.with_class), None
            if progress.state != "pending":
                return progress, None
            now = self.clock()
            if watch is not None and now >= next_watch:
                next_watch = now + PRESSURE_EVERY_S
                reason = watch()
                if reason:
                    return progress, reason
            if now >= deadline:
                return progress, None

    # -- giving back -------------------------------------------------------------------

    def _give_up(
        self,
        step: Step,
        progress: StepProgress,
        pressure: Optional[str],
        vm: VmState,
        after: VmState,
        cfg: SizingConfig,
    ) -> _Stopped:
        """A step did not complete: keep counting a DIMM whose unplug may still happen,
        put a shrink back, and say why the run stops."""
        before, now = vm.device(step.device), after.device(step.device)
        if step.action == "unplug_dimm":
            if progress.state != "rejected":
                self._save(self.record.unplug_pending(step.device))
        elif step.shrinks and before is not None and now is not None:
            # Under pressure, give back what the step took; otherwise stop where the guest got
            # to, so that the driver does not go on unplugging by itself after we have given up.
            self._revert(step, before.size if pressure else now.size, after)
            after = self._observe()
        timeout_s = _step_timeout(cfg, step)
        return _Stopped(
            outcomes.step_stopped(
                step, progress, pressure, timeout_s=timeout_s, observed=after.total
            )
        )

    def _settle(self, step: Step) -> StepProgress:
        """Journal, send and wait for a step that puts things back (a revert, a repair)."""
        self._write(step, "intent")
        self.backend.begin(step)
        progress, _ = self._wait(step, SETTLE_S)
        return progress

    def _revert(self, step: Step, size: int, vm: VmState) -> StepProgress:
        self._note(Note("reverted", f"reverting {step.device} requested-size to {fmt_bytes(size)}"))
        return self._settle(Step("resize_virtio_mem", step.device, size, 0, vm.total))

    def _relieve(self, last: Step, vm: VmState, cfg: SizingConfig, reader: UsageReader) -> bool:
        """Stopping mid-shrink: if the guest is now short of memory, give back the last
        step (a virtio-mem one: an unplugged DIMM cannot be given back); whether it was
        given back: the revert done, not merely asked for (refused, or still under way
        when the wait ended, the step may stand as it was done)."""
        if not _resize_shrink(last):
            return False
        block = vm.virtio_mem.block if vm.virtio_mem else 0
        pressure = self._pressure(reader.since_last_step(), cfg, block)
        if not pressure:
            return False
        self._note(Note("reverted", f"{pressure}: the last step is given back"))
        try:
            progress = self._revert(last, last.size - last.delta, vm)
        except BackendError as exc:
            progress = StepProgress("rejected", exc.with_class)
        if progress.state == "done":
            return True
        said = "refused" if progress.state == "rejected" else "still under way"
        self._note(
            Note(
                "reverted",
                f"{last.device}: the last step was not given back (the revert was {said}"
                + (f": {progress.detail})" if progress.detail else ")"),
            )
        )
        return False

    @staticmethod
    def _pressure(usage: Optional[GuestUsage], cfg: SizingConfig, block: int) -> Optional[str]:
        return safety.under_pressure(usage, cfg.settings, block)

    # -- records -------------------------------------------------------------------------

    def _finish(self, outcome: Outcome, pending: Optional[PendingGrow] = None) -> None:
        self._save(
            self.record.finish(
                outcome.status, outcome.reason, outcome.message, outcome.observed, self.clock()
            ).grow_held(pending)
        )

    def _write(self, step: Step, phase: Phase) -> None:
        self._save(self.record.begin(step, phase))

    def _save(self, record: Record) -> None:
        self.record = self.state.save(record)

    def _observe(self) -> VmState:
        """The VM now, with kata-mem's own devices marked. Entries of ``owned`` that no
        longer name anything in it are dropped (written with the record's next save), but
        not a plug the hypervisor accepted and does not show yet (libvirt shows a DIMM
        once it is in the live XML): the next call's repair decides about that one."""
        record = self.record
        vm = owned_view(self.backend.observe(), record.owned)
        kept = still_owned(vm, record.owned)
        step = record.step
        accepted = (
            step.device
            if step is not None and step.action == "plug_dimm" and record.phase == "issued"
            else None
        )
        self.record = record.keep_owned(
            tuple(o for o in record.owned if o in kept or o.id == accepted)
        )
        return vm

    def _observe_safely(self, vm: VmState) -> VmState:
        try:
            return self._observe()
        except KataMemError:
            return vm

    def _note(self, note: Note) -> None:
        log.warning("%s", note.text)
        self.notes.append(note)
