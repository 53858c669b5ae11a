"""Guest usage readings, and whether one is fresh enough to decide a shrink on.

The balloon reports every ``stats_interval_s`` and QEMU stamps each reading in
whole seconds, so a reading may predate the step that just ended. A
:class:`UsageReader` follows one call's steps and judges each reading against
them, waiting for a newer one only when that could change the answer.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

from kata_mem.backends import Backend
from kata_mem.core import safety
from kata_mem.core.model import GuestUsage, Settings, VmState


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


class UsageReader:
    """The guest usage readings of one call, judged against the steps it ran."""

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
        # stamped before that end may not show the step yet.
        self._last_end: Optional[float] = None
        self._total_before_last = 0

    def latest(self) -> Optional[GuestUsage]:
        """The latest reading, however old."""
        return self._backend.guest_usage()

    def fresh(self, after: Optional[float] = None) -> Optional[GuestUsage]:
        """A reading taken at or after ``after`` (default: now), waiting for it if need be."""
        return fresh_usage(
            self._backend, self._settings.stats_interval_s, self._clock, self._sleep, after
        )

    def step_done(self, total_before: int) -> None:
        """A shrink step from ``total_before`` has just been verified."""
        self._last_end, self._total_before_last = self._clock(), total_before

    def since_last_step(self) -> Optional[GuestUsage]:
        """A reading that shows the last step (waiting for it if need be)."""
        return self.fresh(after=self._last_end)

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
    ) -> tuple[safety.Verdict, Optional[GuestUsage]]:
        """The safety check for shrinking to ``after_total``, waiting only when it must.

        The latest reading is used if it is recent. One that may predate the
        previous step is judged as if it did (the VM then had more memory, so more
        counts as removed: the conservative side). A shrink is deferred only on a
        reading taken during this call and after the previous step: if the quick
        judgement says defer on an older one, a fresh reading is awaited first.
        """
        usage = self._recent()
        since = self._last_end if self._last_end is not None else self._started
        stale = usage is not None and (usage.last_update or 0) < since
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
            )

        verdict = judge(usage, current)
        if verdict.action == "defer" and stale:
            usage = self.fresh(after=since)
            verdict = judge(usage, vm.total)
        return verdict, usage
