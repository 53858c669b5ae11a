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
    """What the executor needs from a hypervisor: five methods, no policy."""

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
        """The latest guest memory statistics; ``None`` without a balloon. Reads only:
        the statistics polling interval is set when the backend connects."""
        ...

    def close(self) -> None: ...
