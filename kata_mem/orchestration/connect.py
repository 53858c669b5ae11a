"""Opening a sandbox's backend, and asking whether its VM is still there: the adapter its
endpoint names, imported only then, so that a plan loads no client library
(``qemu.qmp``, ``libvirt``). Both change nothing on the VM."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Optional

from kata_mem.backends import Backend
from kata_mem.core.backing import MemoryBackend
from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import MissingDependency
from kata_mem.core.values import Frozen, replace


class Opened(Frozen):
    """A connected backend, and its endpoint as reached: for QMP, with the VMM it led to
    (:class:`~kata_mem.core.endpoint.VmmIdentity`), which the saved request keeps."""

    backend: Backend
    endpoint: Endpoint


def open_backend(
    endpoint: Endpoint, env: Mapping[str, str], *, dimm_backend: Optional[MemoryBackend] = None
) -> Opened:
    """Connect to the endpoint's hypervisor; the client library is imported only now.
    ``env`` is the caller's environment (libvirt's session daemon keeps QEMU's pid file
    under ``XDG_RUNTIME_DIR``).
    Over QMP, new DIMMs get ``dimm_backend`` (:func:`kata_mem.core.backing.dimm_backend`),
    and none is plugged without it; libvirt backs a DIMM as the domain's
    ``<memoryBacking>`` says (docs/guide/backends.md).
    An endpoint with a ``vmm`` is connected to that VMM only; a saved one without
    (:attr:`~kata_mem.core.endpoint.Endpoint.unpinned`) to root's or the caller's only.

    :raises BackendUnavailable: the endpoint cannot be reached, or leads to another VMM
        than its ``vmm`` (``gone``).
    :raises MissingDependency: the backend's client library is not installed (libvirt-python
        comes only with the ``kata-mem[libvirt]`` extra); the backend modules raise it on
        import, and the message names the endpoint.
    """
    with _library_for(endpoint):
        if endpoint.kind == "qmp":
            from kata_mem.backends.qmp import QmpBackend

            qmp = QmpBackend.connect(
                endpoint.target,
                dimm_backend=dimm_backend,
                vmm=endpoint.vmm,
                unpinned=endpoint.unpinned,
            )
            return Opened(qmp, replace(endpoint, vmm=qmp.vmm))
        from kata_mem.backends.libvirt import LibvirtBackend

        return Opened(LibvirtBackend.connect(endpoint.target, endpoint.domain, env), endpoint)


def vm_gone(endpoint: Endpoint) -> Optional[str]:
    """Why the endpoint's VM no longer exists, or None when it is there, decided by its
    adapter as it decides when connecting, but without a session: a bare ``connect(2)``
    for QMP (a monitor busy with another call counts as there), a lookup over a
    read-only connection for libvirt.

    :raises BackendUnavailable: it cannot be told (not a socket, a symlink as root, the
        daemon unreachable, a domain that is not running), as connecting would say.
    :raises MissingDependency: as for :func:`open_backend`.
    """
    with _library_for(endpoint):
        if endpoint.kind == "qmp":
            from kata_mem.backends import qmp_socket

            return qmp_socket.presence(endpoint.target, endpoint.vmm, unpinned=endpoint.unpinned)
        from kata_mem.backends import libvirt

        return libvirt.presence(endpoint.target, endpoint.domain)


@contextmanager
def _library_for(endpoint: Endpoint) -> Iterator[None]:
    """A missing client library, named with the endpoint that needs it."""
    try:
        yield
    except MissingDependency as exc:
        raise MissingDependency(f"{endpoint.describe()}: {exc.message}") from exc
