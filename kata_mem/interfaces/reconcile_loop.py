"""The reconcile loop of ``kata-mem serve``: it does what the ``kata-mem reconcile`` timer
did, for the sandboxes that have something pending, and nothing for the others: a
deferred shrink whose retry time has come, a DIMM unplug still pending, a grow held by
the pod cgroup, a step a crash cut short, a VM that is gone
(:func:`kata_mem.orchestration.reconcile.visit`). Each visit takes the sandbox's turn and
a pool thread of the :class:`~kata_mem.interfaces.service.Service`, as a request does, so
a visit and a request for one sandbox never run at once.

What is pending is known from the node's view (:mod:`kata_mem.interfaces.node_view`),
which the kernel keeps current: a journal or saved request changed, by this service or
any other process, is read again when inotify says so; a VM whose QEMU exits (its pidfd)
or whose monitor socket goes is visited at once, and forgotten. A sandbox whose VM the
kernel cannot watch (a libvirt domain, no pid in this namespace, no pidfd) is visited at
every interval, as every sandbox was before (issue 36: 13 % of a CPU at 1,000 idle
sandboxes).

A full pass, as the loop used to make every interval, runs one interval after start (every
sandbox listed and visited: what a restart after a crash must settle) and then every
``FULL_PASS_S`` as a safety net: the view lists the state directory and reads again each
entry whose files moved (a ``stat`` of each file), so what no event reported is still found
(a state directory mounted over or moved with its parent, which inotify does not follow, or
a bug here), at a cost of about 0.03 ms a sandbox every ten minutes. The node's ledger is checked against
the journals once something changed, at most every ``LEDGER_CHECK_S``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple, Optional, TypeVar

from kata_mem.core.errors import KataMemError
from kata_mem.edges.logs import describe, get_logger
from kata_mem.interfaces.node_view import NodeView
from kata_mem.interfaces.service import Service

if TYPE_CHECKING:
    from kata_mem.edges.statefiles import StateDirFault

# One logger for every line of serve (its modules are one service to an operator).
log = get_logger("kata_mem.interfaces.service")
T = TypeVar("T")
FIRST = asyncio.FIRST_COMPLETED

#: Seconds between two visits of a sandbox that has something pending, or whose VM the
#: kernel cannot watch (``--reconcile-interval``).
RECONCILE_INTERVAL_S = 5.0
#: Seconds between two full passes (the safety net above).
FULL_PASS_S = 600.0
#: How often, at most, the loop checks the node's ledger against the journals (and mends
#: it), once something changed.
LEDGER_CHECK_S = 60.0
#: Sandboxes the loop visits at once; the rest of the pool stays for requests.
RECONCILE_WORKERS = 8
#: Events are read this long after the first woke the loop: an apply writes its journal
#: and request several times within milliseconds; they are read once.
SETTLE_S = 0.05


class Unusable(NamedTuple):
    """Why a pass could not read the state directory, as a value: the error's class and,
    for the state directory's own errors, which fault. A pass that meets the same one
    again says nothing (``/healthz`` says it, in words, each time it is asked); its words
    may differ (a mode, an errno's text) while the fault is the one already said."""

    error: type[KataMemError]
    fault: Optional[StateDirFault]

    @classmethod
    def of(cls, exc: KataMemError) -> Unusable:
        from kata_mem.edges.statefiles import StateDirError

        return cls(type(exc), exc.fault if isinstance(exc, StateDirError) else None)


class ReconcileLoop:
    """The loop, visiting the sandboxes of ``service``'s state directory with its thread
    pool, its sandboxes' turns and its metrics, and keeping its node view."""

    def __init__(self, service: Service, interval: float = RECONCILE_INTERVAL_S) -> None:
        self.service = service
        self.state_dir = service.state_dir
        self.interval = interval
        self.view = NodeView(self.state_dir)
        service.view = self.view  # GET /v1/node and /metrics answer from it
        # why the last pass could not read the state directory
        self._unusable: Optional[Unusable] = None
        # when the loop last checked the node's ledger against the journals (monotonic)
        self._ledger_checked = -LEDGER_CHECK_S
        # when the last full pass began (monotonic), when one was last tried (it may find
        # the state directory unusable: tried again an interval later); how many there were
        self._full_at = -FULL_PASS_S
        self._full_tried = -FULL_PASS_S
        self.full_passes = 0
        # sandbox -> when (time.time(), as the journal's retry_at) it is to be visited
        self._due: dict[str, float] = {}
        # sandboxes whose VM's pidfd was opened and not yet proven by a visit
        self._unproven: set[str] = set()

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.service.pool, fn)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``: a full pass an interval after start and every ``FULL_PASS_S``, and the visits
        that are due or that the kernel's events call for in between; a visit under way
        is finished (a step in flight), never cut."""
        wake = asyncio.Event()
        self.view.start(asyncio.get_running_loop(), wake.set)
        # The first full pass one interval after start, as the first pass was before; the
        # view is read, and the kernel's events acted on, from the start.
        self._full_tried = time.monotonic()
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                wake.clear()
                try:
                    if time.monotonic() >= self._next_full():
                        await self.one_pass()
                    else:
                        await self.step()
                except Exception as exc:  # a bug: logged, and the next pass tries again
                    log.error("reconcile pass failed: %s", describe(exc))
                woken = asyncio.ensure_future(wake.wait())
                await asyncio.wait({stopped, woken}, timeout=self._timeout(), return_when=FIRST)
                woken.cancel()
                if wake.is_set() and not stop.is_set():
                    await asyncio.sleep(SETTLE_S)
        finally:
            stopped.cancel()
            self.view.close()

    def _next_full(self) -> float:
        """When (monotonic) the next full pass is to run."""
        return max(self._full_at + FULL_PASS_S, self._full_tried + self.interval)

    def _timeout(self) -> float:
        """Until the next visit due, the next full pass, or (while the kernel watches
        nothing: no inotify, no state directory yet, or one that cannot be used) the next
        interval; never less than ``SETTLE_S``, so that nothing can make the loop spin."""
        if self._unusable is not None:
            return self.interval
        left = [self._next_full() - time.monotonic()]
        if self._due:
            left.append(min(self._due.values()) - time.time())
        if self.view.inotify is None or self.view.root_wd is None:
            left.append(self.interval)
        return max(SETTLE_S, min(left))

    def _said(self, exc: KataMemError) -> None:
        unusable = Unusable.of(exc)
        if unusable != self._unusable:  # said once, not every pass
            log.warning("reconcile: %s", exc.message)
        self._unusable = unusable

    async def _sync(self) -> bool:
        """Bring the view up to date and schedule what changed; False when the state
        directory cannot be used (said once)."""
        async with self.view.lock():
            try:
                await self.view.sync(self.service.read_view)
            except KataMemError as exc:
                self._said(exc)
                return False
        self._unusable = None
        now = time.time()
        for name in self.view.take_changed():
            if self.view.arm(name):
                self._unproven.add(name)
            self._schedule(name, now)
        self.service.metrics.watched.set(len(self.view.vms))
        return True

    def _schedule(self, name: str, now: float, *, done: Optional[str] = None) -> None:
        """When to visit ``name`` next, from its entry: now to prove a pid just watched
        (:meth:`NodeView.arm`); for what is pending, when it is; at every interval when
        the kernel cannot watch its VM; else never (until an event). ``done``: what the
        visit just made did (a failed or waiting one is tried again an interval later,
        as each pass did)."""
        entry = self.view.entries.get(name)
        if entry is None or entry.files is None:
            self._due.pop(name, None)
            self._unproven.discard(name)
            return
        # Proven by the first full pass, which visits every sandbox, until it has run.
        proof = name in self._unproven and self.full_passes > 0
        times = [now] if proof else []
        if done in ("failed", "waiting"):
            times.append(now + self.interval)
        if not entry.has_request:
            # Forgotten, or said to be skipped (a journal of --force only): once a call
            # that is making it had time to save its request.
            if done is None:
                times.append(now + self.interval)
        else:
            record = entry.files.record
            if record.state == "running" or record.pending_unplug:
                times.append(now + self.interval)  # as long as it stays so
            if record.pending_grow is not None:
                times.append(now + self.interval)  # the cgroup's limit is read to know
            if record.deferred is not None:
                times.append(record.deferred.retry_at)
            if not self.view.watched(name):
                times.append(now + self.interval)
        if not times:
            self._due.pop(name, None)
            return
        due = min(times)
        if done is not None and not proof:
            # What a visit left as it was is visited again an interval later, as each pass
            # did; a change the kernel reports since is scheduled from what it changed.
            due = max(due, now + self.interval)
        self._due[name] = due

    async def step(self) -> None:
        """What the kernel reported, read; then the visits that are due."""
        if not await self._sync():
            return
        now = time.time()
        for name in self.view.gone:  # its QEMU exited, or its socket went: now
            self._due[name] = now
        self.view.gone.clear()
        await self._visit_all([n for n, t in self._due.items() if t <= now])
        await self._mend()

    async def one_pass(self) -> None:
        """The full pass: list the state directory, read again every entry whose files
        moved, visit each sandbox whose journal asks for it (every sandbox the first
        time), and check the ledger.

        A sandbox a request holds is left to that request (it reconciles first as
        well) and visited on a later pass.
        """
        from kata_mem.edges.statedir import list_state_dir

        self._full_tried = time.monotonic()
        first = self.full_passes == 0
        names: list[str] = []
        if first:
            # Every sandbox kata-mem's, as reconcile lists them: each is visited once.
            try:
                names = await self._run(lambda: list_state_dir(self.state_dir).sandboxes)
            except KataMemError as exc:
                self._said(exc)
                return
            self._unusable = None
        self.view.everything = True
        if not await self._sync():
            return
        self._full_at = time.monotonic()
        self.view.gone.clear()  # every sandbox is visited, or scheduled, below
        now = time.time()
        if not first:
            # The safety net: what the sync found changed is scheduled (_sync); what is due
            # now is visited. The view lists the directory as a listing would, so it is not
            # listed twice (half of the net's cost at 1,000 sandboxes).
            names = [n for n, t in self._due.items() if t <= now]
        await self._visit_all(names)
        await self._mend(every=self.view.inotify is None)
        self.full_passes += 1
        self.service.metrics.full_passes.inc()  # counted once done

    async def _visit_all(self, names: list[str]) -> None:
        room = asyncio.Semaphore(RECONCILE_WORKERS)

        async def one(sandbox: str) -> None:
            async with room:
                if self.service.turns.busy(sandbox):
                    # Left to the request (it reconciles first as well): an interval later.
                    self._due[sandbox] = time.time() + self.interval
                    return
                async with self.service.turns.held(sandbox):
                    done = await self._visit(sandbox)
                self._unproven.discard(sandbox)
                self._schedule(sandbox, time.time(), done=done)

        await asyncio.gather(*(one(name) for name in names))

    async def _mend(self, every: bool = False) -> None:
        """Check the node's ledger against the journals, once something changed since the
        last check (``every``: whether or not, when the kernel reports no change), at most
        every ``LEDGER_CHECK_S``: it reads every journal under the node lock."""
        if not (every or self.view.changed):
            return
        if time.monotonic() - self._ledger_checked < LEDGER_CHECK_S:
            return
        from kata_mem.orchestration.reconcile import mend_ledger

        self.view.changed = False
        self._ledger_checked = time.monotonic()
        await self._run(lambda: mend_ledger(self.state_dir))

    async def _visit(self, sandbox: str) -> str:
        from kata_mem.orchestration.reconcile import visit

        env = self.service.env
        done = await self._run(lambda: visit(self.state_dir, sandbox, env, due_only=True))
        self.service.metrics.count_visit(done.action, done.outcome, done.unseen)
        if done.action == "retried" and done.outcome is not None:
            self.service.saw(sandbox, done.unseen)
        elif done.action == "cleaned":
            self.service.saw(sandbox, None)
        if done.action == "idle":
            return done.action
        level = logging.WARNING if done.action == "failed" else logging.INFO
        log.log(level, "reconcile: sandbox %s: %s: %s", sandbox, done.action, done.detail)
        for note in done.notes:
            log.warning("reconcile: sandbox %s: %s", sandbox, note.text)
        return done.action
