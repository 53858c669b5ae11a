"""Where a VM's hypervisor listens (:class:`Endpoint`: a QMP socket, or a libvirt URI
and domain) and which VMM it led to (:class:`VmmIdentity`), as a request's ``backend``
object carries them. Pure.

The request, the journal, the backends and the status all speak of endpoints; none of
them needs the request to do so.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional

from kata_mem.core.errors import InputError
from kata_mem.core.fields import REQUEST, path
from kata_mem.core.units import UINT64_MAX
from kata_mem.core.values import Frozen

#: The libvirt URIs kata-mem opens: local connections only, whatever wrote the URI (the
#: command line, a shim request, a saved request on disk). libvirt's other transports
#: reach another host (``ssh``, ``tcp``, ``tls``, ``libssh``) or run a command
#: (``ext``, ``?command=``); query parameters pick a command, a socket or a daemon
#: (``?socket=``, ``?netcat=``, ``?no_verify=``, ``embed?root=``), and a ``test:///FILE``
#: URI makes libvirt read that file as root (https://libvirt.org/uri.html and
#: https://libvirt.org/remote.html: transports and extra parameters).
LIBVIRT_URIS = (
    "qemu:///system",
    "qemu:///session",
    "qemu+unix:///system",
    "qemu+unix:///session",
    "test:///default",
)


#: uids and gids are 32 bits (Linux ``uid_t``); pids are positive ``pid_t``s.
_UID_MAX = (1 << 32) - 1
_PID_MAX = (1 << 31) - 1


class VmmIdentity(Frozen):
    """Which VMM a QMP socket led to when kata-mem last connected through it: the socket
    file (its filesystem device, inode and owner) and the process listening on it (its
    uid and pid, from ``SO_PEERCRED``; pid ``None`` when the kernel cannot tell, as for a
    peer in another pid namespace).

    The saved request keeps it (``backend.vmm``), so that ``kata-mem reconcile``, the
    service's loop and ``GET /v1/sandboxes/ID`` talk only to the VMM that was applied to.
    A socket path in a directory others may write (sticky, as ``/tmp``) can be bound
    again by another user once that VMM is gone; what listens there then is another
    socket, or another process, and its VM is gone. A path bound
    again is a new socket file (a new inode; a filesystem may reuse a freed inode number,
    which is why its owner and the listener are compared too), and the listener's
    credentials are the kernel's (unix(7), ``SO_PEERCRED``: those of the process that
    last called ``listen`` on the socket), so none of these is chosen by whoever binds
    the path.
    """

    device: int
    inode: int
    owner_uid: int
    peer_uid: int
    peer_pid: Optional[int] = None

    def other_socket(self, device: int, inode: int, owner_uid: int) -> Optional[str]:
        """What makes the socket file now at the path another than this one, or None."""
        if (device, inode, owner_uid) == (self.device, self.inode, self.owner_uid):
            return None
        return (
            f"another socket than the one kata-mem applied through (inode {inode}, owner uid "
            f"{owner_uid}; it was inode {self.inode}, owner uid {self.owner_uid})"
        )

    def other_peer(self, uid: int, pid: Optional[int]) -> Optional[str]:
        """What makes the process listening now another than this one, or None. A pid is
        compared only when both are known."""
        known = None not in (pid, self.peer_pid)
        if uid == self.peer_uid and (not known or pid == self.peer_pid):
            return None
        return (
            f"another process listens on it than the one kata-mem applied through (uid {uid}, "
            f"pid {pid}; it was uid {self.peer_uid}, pid {self.peer_pid})"
        )

    def to_json(self) -> dict[str, Optional[int]]:
        return {
            "device": self.device,
            "inode": self.inode,
            "owner_uid": self.owner_uid,
            "peer_uid": self.peer_uid,
            "peer_pid": self.peer_pid,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any], at: str) -> VmmIdentity:
        """:raises InputError: a missing field, or one that is not an integer in range."""
        REQUEST.only(doc, ("device", "inode", "owner_uid", "peer_uid", "peer_pid"), at)

        def required(key: str, maximum: int) -> int:
            return REQUEST.required_integer(doc, key, at, minimum=0, maximum=maximum)

        return cls(
            required("device", UINT64_MAX),
            required("inode", UINT64_MAX),
            required("owner_uid", _UID_MAX),
            required("peer_uid", _UID_MAX),
            REQUEST.integer(doc, "peer_pid", at, minimum=1, maximum=_PID_MAX),
        )


class Endpoint(Frozen):
    """Where a VM's hypervisor listens: a QMP socket, or a libvirt URI and domain.

    ``vmm`` (QMP only) is the VMM the socket led to when kata-mem last applied through
    it, kept in the saved request: a later call through that request talks to that VMM
    only, and finds the VM gone when another listens there (:class:`VmmIdentity`).

    ``saved`` marks an endpoint read from a saved request (input from disk, which no
    caller named just now). One without a ``vmm`` was saved by a kata-mem older than the
    pin: it leads only to a socket and a listener that are root's or the caller's, on a
    way no other user can swap, until a call through it pins the VMM (whoever could
    swap the way could put their own VMM behind it). Not saved itself: a request written
    back carries the ``vmm`` instead; nor compared (``__eq__``, ``__hash__``): an endpoint
    read back is the one that was saved.

    :raises InputError: (on construction) a libvirt URI that is not one of
        :data:`LIBVIRT_URIS`; every interface builds its endpoint here, so every one
        is checked the same way.
    """

    kind: Literal["qmp", "libvirt"]
    target: str
    domain: str = ""
    vmm: Optional[VmmIdentity] = None
    saved: bool = False

    def _compared(self) -> tuple[object, ...]:
        return (self.kind, self.target, self.domain, self.vmm)

    def __eq__(self, other: object) -> bool:
        if type(other) is not Endpoint:
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._compared())

    @property
    def unpinned(self) -> bool:
        """A saved QMP endpoint whose VMM is not pinned: it must prove whose it is."""
        return self.saved and self.kind == "qmp" and self.vmm is None

    def __post_init__(self) -> None:
        if self.kind == "libvirt" and self.target not in LIBVIRT_URIS:
            raise InputError(
                f"libvirt URI {json.dumps(self.target)[:200]}: not a local connection; expected "
                f"one of {', '.join(LIBVIRT_URIS)} (kata-mem runs as root: no remote transport, "
                "no command, no query parameters)"
            )

    def describe(self) -> str:
        return (
            f"QMP {self.target}"
            if self.kind == "qmp"
            else f"libvirt {self.target} domain {self.domain}"
        )

    def to_json(self) -> dict[str, Any]:
        """The request's ``backend`` object."""
        if self.kind == "qmp":
            doc: dict[str, Any] = {"type": "qmp", "socket": self.target}
            if self.vmm is not None:
                doc["vmm"] = self.vmm.to_json()
            return doc
        return {"type": "libvirt", "uri": self.target, "domain": self.domain}

    @classmethod
    def from_json(cls, doc: dict[str, Any], at: str = "backend") -> Endpoint:
        """Read a request's ``backend`` object.

        :raises InputError: an unknown type, a missing or empty field, an unknown field,
            or a libvirt URI that is not local.
        """
        kind = doc.get("type")
        if kind == "qmp":
            REQUEST.only(doc, ("type", "socket", "vmm"), at)
            vmm = REQUEST.mapping(doc, "vmm", at)
            return cls(
                "qmp",
                REQUEST.required_string(doc, "socket", at),
                vmm=None if vmm is None else VmmIdentity.from_json(vmm, path(at, "vmm")),
            )
        if kind == "libvirt":
            REQUEST.only(doc, ("type", "uri", "domain"), at)
            uri = REQUEST.required_string(doc, "uri", at)
            domain = REQUEST.required_string(doc, "domain", at)
            try:
                return cls("libvirt", uri, domain)
            except InputError as exc:
                raise InputError(f"{REQUEST.name(path(at, 'uri'))}: {exc.message}") from exc
        raise REQUEST.fail(path(at, "type"), '"qmp" or "libvirt"', kind)
