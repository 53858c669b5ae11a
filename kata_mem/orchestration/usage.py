"""Guest usage readings, and whether one is fresh enough to decide a shrink on.

The balloon reports every ``stats_interval_s`` and QEMU stamps each reading in
whole seconds, so a stamp alone proves a reading newer than a moment only a
second later. Where the hypervisor also counts the readings it received
(``GuestUsage.sequence``), a reading whose count differs from one looked at
after that moment arrived after it. A :class:`UsageReader` follows one call's
steps and judges each reading against them; after each shrink step it asks the
guest for a new reading at once, so that it arrives while the executor verifies
the step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Optional

from kata_mem.backends import Backend
from kata_mem.core import safety
from kata_mem.core.errors import BackendError
from kata_mem.core.model import GuestUsage, Settings, VmState
from kata_mem.edges.logs import get_logger

log = get_logger(__name__)

#: A reading asked for is looked for at once, then after waits that double from
#: ``FIRST_LOOK_S`` up to ``FRESH_POLL_S`` (one QMP round trip each): a guest answers the
#: ask within a few milliseconds, often before the ask's own reply (measured under TCG:
#: docs/benchmarks.md, "Apply +1 GiB"), so a fixed wait first cost more than the answer.
FIRST_LOOK_S = 0.001
FRESH_POLL_S = 0.01
#: The longest wait between two asks for a reading while a grow is not shown yet.
UNTIL_POLL_S = 0.25


def _newer(usage: GuestUsage, after: float, mark: Optional[int]) -> bool:
    """Whether ``usage`` was taken after ``after``: its stamp says so, or its count
    differs from ``mark``, the count of a reading looked at after ``after``."""
    if (usage.last_update or 0) >= after:
        return True
    return mark is not None and usage.sequence is not None and usage.sequence != mark


class UsageReader:
    """The guest usage readings of one call, judged against the steps it ran.

    It may ask the guest for a reading now (``guest-stats-polling-interval`` set to 0
    and back: QEMU then polls at once, hw/virtio/virtio-balloon.c,
    ``balloon_stats_set_poll_interval``), which an apply may do and a read-only
    command never does: only the executor makes a reader.
    """

    def __init__(
        self,
        backend: Backend,
        settings: Settings,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._backend = backend
        self._settings = settings
        self._clock = clock
        self._sleep = sleep
        self._started = clock()
        # When the last shrink step ended and the VM's total before it: a reading
        # stamped before that end may not show the step yet, unless its count
        # differs from ``_mark``, the count of the first reading looked at after it.
        self._last_end: Optional[float] = None
        self._mark: Optional[int] = None
        self._total_before_last = 0
        #: A look taken by :meth:`look_now` (when, and what it read), for :meth:`until`.
        self._looked: Optional[tuple[float, Optional[GuestUsage]]] = None

    def latest(self) -> Optional[GuestUsage]:
        """The latest reading, however old."""
        return self._backend.guest_usage()

    def fresh(
        self, after: Optional[float] = None, first: Optional[GuestUsage] = None
    ) -> Optional[GuestUsage]:
        """A reading taken after ``after`` (default: now), waiting for it if need be:
        up to about two polling intervals; if none comes, the last one, however old
        (the safety check then calls its age unknown). ``first``: the latest reading, read
        by :meth:`_look` after ``after`` (which asked for a new one with it), so that it is
        not read again.
        """
        not_before = self._clock() if after is None else after
        mark = self._mark if after is not None and after == self._last_end else None
        deadline = self._clock() + 3 * self._settings.stats_interval_s + 2.0
        asked = first is not None or after is None
        if first is not None:
            usage: Optional[GuestUsage] = first
        elif after is None:
            usage = self._look()  # not newer than now: a new reading is asked for with it
        else:
            usage = self.latest()
        if usage is None or _newer(usage, not_before, mark):
            return usage
        if mark is None and usage.sequence is not None:
            # This look is after ``not_before``: any later count is a later reading.
            mark = usage.sequence
            if not asked:
                self._ask()
        # Counted, the reading asked for is looked for at once: it is usually there.
        wait = 0.0 if mark is not None else 0.1
        while self._clock() < deadline:
            self._sleep(wait)
            usage = self.latest()
            if usage is None or _newer(usage, not_before, mark):
                return usage
            wait = min(max(2 * wait, FIRST_LOOK_S), FRESH_POLL_S) if mark is not None else 0.1
        return usage

    def _look(self) -> Optional[GuestUsage]:
        """The latest reading, and (where readings are counted) a new one asked for in the
        same exchange (:meth:`~kata_mem.backends.Backend.read_and_ask`)."""
        return self._backend.read_and_ask(self._settings.stats_interval_s)

    def _ask(self) -> None:
        """Have the guest report now, and put its polling interval back at once. A
        refusal to stop polling changed nothing (the readings then come as they come);
        a failure to put it back is raised: the guest must not be left unpolled."""
        try:
            self._backend.set_stats_interval(0)
        except BackendError as exc:
            log.debug("no reading asked for: %s", exc)
            return
        self._backend.set_stats_interval(self._settings.stats_interval_s)

    def step_done(self, total_before: int) -> None:
        """A shrink step from ``total_before`` has just been verified: the reading that
        will show it is asked for now, while the executor goes on."""
        self._last_end, self._total_before_last = self._clock(), total_before
        usage = self._look()
        self._mark = None if usage is None else usage.sequence

    def since_last_step(self) -> Optional[GuestUsage]:
        """A reading that shows the last step (waiting for it if need be)."""
        return self.fresh(after=self._last_end)

    def look_now(self) -> None:
        """Ask for the reading :meth:`until` will wait for, now: called as soon as the
        hypervisor says a grow step is done, before the executor verifies it from the
        hypervisor, so that a backend that can (QMP) sends the ask and the verifying read in
        one exchange, and the guest answers while the read is served."""
        looked = self._clock()
        self._looked = (looked, self._look())

    def until(self, done: Callable[[GuestUsage], bool], timeout_s: float) -> Optional[GuestUsage]:
        """Fresh readings, one after another, until one satisfies ``done`` or ``timeout_s``
        has passed; returns the last one (None if the guest reports none).

        Called once the hypervisor shows the change, when the guest's reading is due: the
        latest reading is looked at and a new one asked for in the same exchange
        (:meth:`_look`, or the look :meth:`look_now` took); until one satisfies ``done``,
        again after waits that double up to ``UNTIL_POLL_S``."""
        deadline = self._clock() + timeout_s
        wait = FRESH_POLL_S
        while True:
            if self._looked is not None:  # the first look, taken by look_now
                (looked, usage), self._looked = self._looked, None
            else:
                looked = self._clock()
                usage = self._look()
            if usage is not None and not done(usage) and self._clock() < deadline:
                usage = self.fresh(looked, usage)
            if (usage is not None and done(usage)) or self._clock() >= deadline:
                return usage
            self._sleep(wait if usage is not None else UNTIL_POLL_S)
            wait = min(2 * wait, UNTIL_POLL_S)

    def answers(self) -> bool:
        """Whether the guest sends a reading now: one taken after this call, asked for and
        waited for as :meth:`fresh` waits."""
        now = self._clock()
        first = self.latest()
        usage = self.fresh(now)
        mark = None if first is None else first.sequence
        return usage is not None and _newer(usage, now, mark)

    def recent(self) -> Optional[GuestUsage]:
        """The latest reading when it is recent enough, else a fresh one."""
        return self._recent()

    def _recent(self) -> Optional[GuestUsage]:
        """The latest reading when it is recent enough, else a fresh one."""
        usage = self.latest()
        if usage is None or usage.age is None or usage.age > self._settings.usage_max_age_s:
            usage = self.fresh()
        return usage

    def check(
        self,
        vm: VmState,
        after_total: int,
        block: int,
        baseline: Optional[GuestUsage],
        irreversible: bool = False,
    ) -> tuple[safety.Verdict, Optional[GuestUsage]]:
        """The safety check for shrinking to ``after_total``, waiting only when it must.

        The latest reading is used if it is recent. After a step, where readings are
        counted (and so one is already on its way), the check waits for one that
        shows the step. Otherwise one that may predate the previous step is judged as
        if it did (the VM then had more memory, so more counts as removed: the
        conservative side). A shrink is deferred only on a reading taken during this
        call and after the previous step: if the quick judgement says defer on an
        older one, a fresh reading is awaited first. ``irreversible``: the step cannot be
        given back (:func:`~kata_mem.core.safety.check_step`).
        """
        since = self._last_end if self._last_end is not None else self._started
        counted = self._last_end is not None and self._mark is not None
        usage = self.fresh(after=since) if counted else self._recent()
        mark = self._mark if self._last_end is not None else None
        stale = usage is not None and not _newer(usage, since, mark)
        ambiguous = stale and self._last_end is not None
        current = self._total_before_last if ambiguous else vm.total

        def judge(u: Optional[GuestUsage], total: int) -> safety.Verdict:
            return safety.check_step(
                current_total=total,
                after_total=after_total,
                usage=u,
                settings=self._settings,
                block=block,
                baseline=baseline,
                irreversible=irreversible,
            )

        verdict = judge(usage, current)
        if verdict.action == "defer" and stale:
            usage = self.fresh(after=since)
            stale = usage is not None and not _newer(usage, since, mark)
            verdict = judge(usage, self._total_before_last if stale and ambiguous else vm.total)
        return verdict, usage
