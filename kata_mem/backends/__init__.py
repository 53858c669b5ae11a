"""The hypervisor port: one small Protocol that every backend implements.

Backends translate; they never decide sizes. A :class:`~kata_mem.model.Step`
arrives with its sizes already planned; the backend issues the hypervisor
commands for it, reports progress from what the hypervisor says, and turns
every hypervisor error into the kata-mem error tree at its boundary. What the
raw reports mean (boot memory, device space, slots, orphans, a finished resize,
balloon statistics) is decided once, in :mod:`kata_mem.reports`; how long to
wait for a step is the executor's.

The QMP and libvirt modules import their client libraries, so they are loaded
only by :func:`open_backend`, when asked for; a missing library is a
:class:`~kata_mem.errors.MissingDependency` (exit 9) raised by the module's import.
"""

from __future__ import annotations

from typing import Optional, Protocol

from kata_mem.model import GuestUsage, Step, VmState
from kata_mem.reports import StepProgress as StepProgress
from kata_mem.request import Endpoint


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


def open_backend(
    endpoint: Endpoint, *, hugepages_path: Optional[str] = None, stats_interval: int = 1
) -> Backend:
    """Connect to the endpoint's hypervisor; the client library is imported only now.

    ``stats_interval`` (seconds) is set on the guest's balloon for its statistics;
    with ``hugepages_path`` (a hugetlbfs mount) new DIMMs are backed by hugepages there.

    :raises BackendUnavailable: the endpoint cannot be reached.
    :raises BackendError: the balloon's statistics polling cannot be set.
    :raises MissingDependency: the backend's client library is not installed (libvirt-python
        comes only with the ``kata-mem[libvirt]`` extra); the backend modules raise it on import.
    """
    if endpoint.kind == "qmp":
        from kata_mem.backends.qmp import QmpBackend

        return QmpBackend.connect(
            endpoint.target, hugepages_path=hugepages_path, stats_interval=stats_interval
        )
    from kata_mem.errors import MissingDependency

    try:
        from kata_mem.backends.libvirt import LibvirtBackend
    except MissingDependency as exc:
        raise MissingDependency(f"{endpoint.describe()}: {exc.message}") from exc
    return LibvirtBackend.connect(endpoint.target, endpoint.domain, stats_interval=stats_interval)
