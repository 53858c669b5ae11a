"""The hypervisor port: one small Protocol that every backend implements.

Backends translate; they never decide sizes. A :class:`~kata_mem.core.model.Step`
arrives with its sizes already planned; the backend issues the hypervisor
commands for it, reports progress from what the hypervisor says, and turns
every hypervisor error into the kata-mem error tree at its boundary. What the
raw reports mean (boot memory, device space, slots, orphans, a finished resize,
balloon statistics) is decided once, in :mod:`kata_mem.core.reports`; how long to
wait for a step is the executor's.

The QMP and libvirt modules import their client libraries, so they are loaded
only when a request names one (:func:`kata_mem.orchestration.connect.open_backend`); a
missing library is a :class:`~kata_mem.core.errors.MissingDependency` (exit 9) raised by
the module's import. The port itself imports no adapter.
"""

from __future__ import annotations

from typing import Optional, Protocol

from kata_mem.core.model import GuestUsage, Step, VmState
from kata_mem.core.reports import StepProgress as StepProgress


class Backend(Protocol):
    """What the executor needs from a hypervisor: seven methods, no policy.

    Only :meth:`begin`, :meth:`set_stats_interval` and :meth:`read_and_ask` change the VM, and the executor
    alone calls them: connecting, observing, polling and reading usage change nothing,
    so that ``status``, ``GET /v1/sandboxes/ID``, a dry run and the presence checks of
    ``reconcile`` leave the VM as they found it (a reader that set, say, the balloon's
    statistics interval would change what the next shrink check is judged on).
    """

    def observe(self) -> VmState:
        """The VM's memory now, from the hypervisor (never from our own records).

        :raises BackendUnavailable: the hypervisor went away.
        :raises BackendError: the hypervisor refused a query.
        """
        ...

    def begin(self, step: Step) -> None:
        """Issue the commands for ``step`` and return without waiting.

        A failed plug leaves no orphan backend object behind. A ``delete_memdev``
        step deletes an orphaned backend object (one in ``VmState.orphans``).

        :raises BackendError: the hypervisor refused; nothing was changed.
        :raises BackendUnsupported: this hypervisor or driver cannot do that at all.
        :raises BackendUnavailable: the connection failed (state unknown; observe again).
        """
        ...

    def poll(self, step: Step, wait_s: float) -> StepProgress:
        """Whether ``step`` is done, still pending, or refused by the guest.

        While it is pending, wait up to ``wait_s`` once for news from the
        hypervisor (an event) before answering, so that callers need not sleep;
        the caller keeps the deadline. For a DIMM unplug, "done" means
        ``DEVICE_DELETED`` arrived and its backend object was deleted.
        """
        ...

    def guest_usage(self) -> Optional[GuestUsage]:
        """The latest guest memory statistics, as they are (with when they were taken);
        ``None`` without a balloon. Reads only: it neither waits for nor causes a new
        reading."""
        ...

    def read_and_ask(self, seconds: int) -> Optional[GuestUsage]:
        """The latest reading, as :meth:`guest_usage` gives it; where this hypervisor counts
        the readings it receives (``GuestUsage.sequence``), a new one is also asked for in the
        same exchange, right after this one is read: the polling interval set to 0 and back
        to ``seconds`` (QEMU then polls at once). A reading counted after this one arrived
        after the ask. Changes the guest's polling as :meth:`set_stats_interval` does, so
        only the executor's reader calls it.

        :raises BackendError: the interval could not be put back to ``seconds`` (a refusal
            to stop polling changed nothing and is not raised).
        :raises BackendUnavailable: the connection failed.
        """
        ...

    def set_stats_interval(self, seconds: int) -> Optional[int]:
        """Have the balloon report the guest's statistics every ``seconds`` (0: stop), and
        return the interval it had (``None``: there is no balloon, and nothing is set).
        Nothing is sent when it already has that interval.

        A port method, not part of connecting: when the guest reports is a side effect,
        the executor's to order (at the start of an apply), and what it returns lets the
        executor put the guest's own interval back after changing it for a while.

        :raises BackendError: the hypervisor refused the interval.
        :raises BackendUnavailable: the connection failed.
        """
        ...

    def close(self) -> None: ...
