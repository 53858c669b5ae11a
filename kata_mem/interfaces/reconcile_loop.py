"""The reconcile loop of ``kata-mem serve``: every ``--reconcile-interval`` it does what
the ``kata-mem reconcile`` timer did, for the sandboxes whose journal asks for it: a
deferred shrink whose retry time has come, a DIMM unplug still pending, a step a crash
cut short, a VM that is gone (:func:`kata_mem.orchestration.reconcile.visit`). Each visit
takes the sandbox's turn and a pool thread of the :class:`~kata_mem.interfaces.service.Service`,
as a request does, so a visit and a request for one sandbox never run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional, TypeVar

from kata_mem.core.errors import KataMemError
from kata_mem.edges.logs import describe, get_logger
from kata_mem.interfaces.service import Service

if TYPE_CHECKING:
    from kata_mem.edges.statefiles import StateDirFault

# One logger for every line of serve (its modules are one service to an operator).
log = get_logger("kata_mem.interfaces.service")
T = TypeVar("T")

#: Seconds between two passes of the reconcile loop (``--reconcile-interval``).
RECONCILE_INTERVAL_S = 5.0
#: How often the loop checks the node's ledger against the journals (and mends it).
LEDGER_CHECK_S = 60.0
#: Sandboxes the loop visits at once; the rest of the pool stays for requests.
RECONCILE_WORKERS = 8


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
    pool, its sandboxes' turns and its metrics."""

    def __init__(self, service: Service, interval: float = RECONCILE_INTERVAL_S) -> None:
        self.service = service
        self.state_dir = service.state_dir
        self.interval = interval
        # why the last pass could not read the state directory
        self._unusable: Optional[Unusable] = None
        # when the loop last checked the node's ledger against the journals (monotonic)
        self._ledger_checked = -LEDGER_CHECK_S

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.service.pool, fn)

    async def run(self, stop: asyncio.Event) -> None:
        """A pass every ``interval`` seconds until ``stop``; a pass under way is finished
        (its visits are steps in flight), never cut."""
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
            if stop.is_set():
                return
            try:
                await self.one_pass()
            except Exception as exc:  # a bug: logged, and the next pass tries again
                log.error("reconcile pass failed: %s", describe(exc))

    async def one_pass(self) -> None:
        """Visit each sandbox of the state directory whose journal asks for it.

        A sandbox a request holds is left to that request (it reconciles first as
        well) and visited on a later pass.
        """
        from kata_mem.edges.statedir import list_state_dir

        try:
            names = await self._run(lambda: list_state_dir(self.state_dir).sandboxes)
        except KataMemError as exc:
            unusable = Unusable.of(exc)
            if unusable != self._unusable:  # said once, not every pass
                log.warning("reconcile: %s", exc.message)
            self._unusable = unusable
            return
        self._unusable = None
        room = asyncio.Semaphore(RECONCILE_WORKERS)

        async def one(sandbox: str) -> None:
            async with room:
                if self.service.turns.busy(sandbox):
                    return
                async with self.service.turns.held(sandbox):
                    await self._visit(sandbox)

        await asyncio.gather(*(one(name) for name in names))
        if time.monotonic() - self._ledger_checked >= LEDGER_CHECK_S:
            # Reads every journal under the node lock: not every pass.
            from kata_mem.orchestration.reconcile import mend_ledger

            self._ledger_checked = time.monotonic()
            await self._run(lambda: mend_ledger(self.state_dir))

    async def _visit(self, sandbox: str) -> None:
        from kata_mem.orchestration.reconcile import visit

        env = self.service.env
        done = await self._run(lambda: visit(self.state_dir, sandbox, env, due_only=True))
        self.service.metrics.count_visit(done.action, done.outcome, done.unseen)
        if done.action == "retried" and done.outcome is not None:
            self.service.saw(sandbox, done.unseen)
        elif done.action == "cleaned":
            self.service.saw(sandbox, None)
        if done.action == "idle":
            return
        level = logging.WARNING if done.action == "failed" else logging.INFO
        log.log(level, "reconcile: sandbox %s: %s: %s", sandbox, done.action, done.detail)
        for note in done.notes:
            log.warning("reconcile: sandbox %s: %s", sandbox, note.text)
