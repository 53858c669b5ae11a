"""Opening a sandbox's backend: the adapter its endpoint names, imported only then, so
that a plan loads no client library (``qemu.qmp``, ``libvirt``)."""

from __future__ import annotations

from typing import Optional

from kata_mem.backends import Backend
from kata_mem.core.request import Endpoint


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
    from kata_mem.core.errors import MissingDependency

    try:
        from kata_mem.backends.libvirt import LibvirtBackend
    except MissingDependency as exc:
        raise MissingDependency(f"{endpoint.describe()}: {exc.message}") from exc
    return LibvirtBackend.connect(endpoint.target, endpoint.domain, stats_interval=stats_interval)
