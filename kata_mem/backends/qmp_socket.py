"""Who listens at a QMP socket, told before a QMP session begins: the socket file's
checks, dialing it, and the identity of the process that listens.

Kept apart from the session adapter (:mod:`kata_mem.backends.qmp`) as ``qemu.qmp`` keeps
its transport (``qemu/qmp/protocol.py``) apart from the QMP client
(``qemu/qmp/qmp_client.py``): nothing here speaks QMP or imports ``qemu.qmp``, so that
:func:`presence` (reconcile's check that a VM is still there) opens no session, and the
ownership proofs (the socket file, then the listener, against a saved request's
:class:`~kata_mem.core.endpoint.VmmIdentity`) are written once, for both.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct
from pathlib import Path
from typing import Optional

from kata_mem.core.endpoint import VmmIdentity
from kata_mem.core.errors import BackendUnavailable, ConfigError
from kata_mem.edges.logs import describe
from kata_mem.edges.ownership import check_way, who

#: How long :func:`presence` waits for ``connect(2)``, and then for the greeting.
PRESENCE_TIMEOUT_S = 1.0

#: Said when a saved request's VMM no longer listens at its socket: another process may
#: have bound the path since (:class:`~kata_mem.core.endpoint.VmmIdentity`).
_NOT_ASKED = "the VM it led to is gone, and what listens there now is not talked to"
#: Said when a request saved before the pin (``backend.vmm``) leads to a VMM it cannot
#: prove is the one applied to (:class:`~kata_mem.core.endpoint.Endpoint`, ``saved``).
_UNPROVEN = (
    "its saved request, written by an earlier kata-mem, does not say which VMM it was applied "
    "to (no backend.vmm), so only a socket and a listener of root's or the caller's, on a way no "
    "other user can swap, are taken for it. Nothing was sent and nothing was changed; an apply "
    "or a shim call that names this socket pins the VMM listening there"
)


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def check_socket(
    path: str, expect: Optional[VmmIdentity] = None, *, unpinned: bool = False
) -> os.stat_result:
    """The socket file at ``path``, or the reason kata-mem does not connect to it.

    In this order: a missing path means the VM is gone; as root a symlink is refused,
    because it could point kata-mem at another VM's monitor; anything but a unix socket
    is refused; with ``expect`` (the VMM a saved request was applied to), another
    socket than that one means its VM is gone; and ``unpinned`` (a saved request without
    one) refuses a socket another user owns, or could swap through a directory above it.

    :raises BackendUnavailable: for each of these (``gone`` when the VM is gone; an
        unpinned socket that is not proven is not gone: its state is kept).
    """
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            if os.geteuid() == 0:
                raise BackendUnavailable(
                    f"QMP socket {path}: is a symlink; refused as root, because a link can "
                    "point kata-mem at another VM's monitor. Pass the socket's real path"
                )
            st = os.stat(path)
    except FileNotFoundError as exc:
        raise BackendUnavailable(
            f"QMP socket {path}: no such file (is the VM running?)", gone=True
        ) from exc
    except OSError as exc:
        raise BackendUnavailable(f"QMP socket {path}: {exc.strerror}") from exc
    if not stat.S_ISSOCK(st.st_mode):
        kind = (
            "directory"
            if stat.S_ISDIR(st.st_mode)
            else "regular file"
            if stat.S_ISREG(st.st_mode)
            else "non-socket file"
        )
        raise BackendUnavailable(f"QMP socket {path}: is a {kind}, not a unix socket")
    other = None if expect is None else expect.other_socket(st.st_dev, st.st_ino, st.st_uid)
    if other is not None:
        raise BackendUnavailable(
            f"QMP socket {path}: {other}; {_NOT_ASKED}",
            gone=True,
            other_vmm=f"the socket file there is inode {st.st_ino}, owner uid {st.st_uid}",
        )
    if unpinned and expect is None:
        if not _trusted(st.st_uid):
            raise BackendUnavailable(
                f"QMP socket {path}: is owned by {who(st.st_uid)}; {_UNPROVEN}"
            )
        try:
            check_way(Path(path), f"QMP socket {path}", "the socket")
        except ConfigError as exc:
            raise BackendUnavailable(f"{exc.message}; {_UNPROVEN}") from exc
    return st


def not_dialed(path: str, exc: OSError) -> BackendUnavailable:
    """Why ``connect(2)`` to the socket at ``path`` failed. Refused (nobody listens, as
    after QEMU was killed) and a file removed meanwhile mean the VM is gone."""
    if isinstance(exc, FileNotFoundError):
        return BackendUnavailable(
            f"QMP socket {path}: no such file (is the VM running?)", gone=True
        )
    return BackendUnavailable(
        f"QMP socket {path}: {refused(exc) or f'no QMP session: {describe(exc)}'}",
        gone=isinstance(exc, ConnectionRefusedError),
    )


def identify(
    path: str,
    st: os.stat_result,
    sock: socket.socket,
    expect: Optional[VmmIdentity],
    unpinned: bool = False,
) -> VmmIdentity:
    """The VMM that ``sock``, connected to the socket file ``st``, reached: told before a
    byte is read or sent.

    :raises BackendUnavailable: (``gone``) another process than ``expect``'s listens;
        (not ``gone``) ``unpinned`` and the listener is neither root nor the caller.
    """
    uid, pid = peer_credentials(sock)
    other = None if expect is None else expect.other_peer(uid, pid)
    if other is not None:
        raise BackendUnavailable(
            f"QMP socket {path}: {other}; {_NOT_ASKED}",
            gone=True,
            other_vmm=f"the process listening there is uid {uid}, pid {pid}",
        )
    if unpinned and expect is None and not _trusted(uid):
        raise BackendUnavailable(
            f"QMP socket {path}: the process listening on it (pid {pid}) runs as {who(uid)}; "
            f"{_UNPROVEN}"
        )
    return VmmIdentity(st.st_dev, st.st_ino, st.st_uid, uid, pid)


def dial(path: str, timeout: float) -> socket.socket:
    """A unix stream socket connected to ``path``, non-blocking once connected; while the
    listener's backlog is full, ``connect(2)`` waits in the kernel for room, up to
    ``timeout`` (``SO_SNDTIMEO``, which a unix socket's connect waits by: net/unix/af_unix.c
    ``unix_stream_connect``, ``unix_wait_for_peer``), as QEMU's monitor keeps other clients
    waiting while it serves one.

    Not asyncio's ``sock_connect``, nor a socket with a Python timeout: both connect a
    non-blocking socket, whose ``connect(2)`` on a full backlog fails with EAGAIN, not with
    EINPROGRESS as a TCP connection under way does (connect(2), "EAGAIN"). With a Python
    timeout ``connect`` raises it at once (python/cpython#117208); asyncio
    (Lib/asyncio/selector_events.py ``_sock_connect``) takes it for a connection under way
    and returns the socket unconnected, whose first read fails with EINVAL (the same bug in
    Rust: tokio-rs/mio#1560). Every call beyond the backlog then failed with "no QMP
    session: [Errno 22] Invalid argument" (issue 33, item 12).

    :raises BlockingIOError: the backlog stayed full for ``timeout``.
    :raises OSError: ``connect(2)`` failed otherwise (refused, no such file).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        whole = int(timeout)
        tv = struct.pack("ll", whole, int((timeout - whole) * 1_000_000))  # struct timeval
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        sock.connect(path)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def peer_credentials(sock: socket.socket) -> tuple[int, Optional[int]]:
    """The uid and pid of the process at the other end of a connected unix socket
    (``SO_PEERCRED``: for a listening socket, the process that called ``listen``).

    The pid is None when the kernel gives 0 (the peer is not a process in our pid
    namespace).
    """
    # struct ucred (socket(7)): a pid_t, then uid_t and gid_t, which are unsigned.
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
    pid, uid, _gid = struct.unpack("iII", raw)
    return uid, pid if pid > 0 else None


def refused(cause: BaseException) -> Optional[str]:
    """What a refused or forbidden connection means for a user (what happened and what to
    do), or None for any other failure."""
    if isinstance(cause, ConnectionRefusedError):
        return "connection refused (the VM is gone or not listening)"
    if isinstance(cause, PermissionError):
        return "permission denied (run kata-mem as the user that owns the VM, or as root)"
    return None


def presence(
    path: str, expect: Optional[VmmIdentity] = None, *, unpinned: bool = False
) -> Optional[str]:
    """Why the VM whose monitor is at ``path`` is gone, or None when it is there.

    Decided as :meth:`kata_mem.backends.qmp.QmpBackend.connect` decides (:func:`check_socket`,
    the same reading of a failed ``connect(2)``, the same listener check), but with a bare
    ``connect(2)``: no QMP session is opened and nothing is sent, so a monitor busy with
    another client (the connection waits in its backlog, or the backlog is full) counts as
    there.

    :raises BackendUnavailable: it cannot be told (a symlink as root, not a socket,
        permission denied, an ``unpinned`` VMM not proven), as connecting would say.
    """
    try:
        st = check_socket(path, expect, unpinned=unpinned)
        try:
            sock = dial(path, PRESENCE_TIMEOUT_S)
        except BlockingIOError:
            return None  # a backlog still full: the monitor is busy, its VM is there
        except OSError as exc:
            raise not_dialed(path, exc) from exc
        with sock:
            sock.settimeout(PRESENCE_TIMEOUT_S)
            identify(path, st, sock, expect, unpinned)
            # Take the greeting before hanging up, as a client does; a monitor busy with
            # another client sends none within the timeout, and that is fine too.
            with contextlib.suppress(OSError):
                sock.recv(4096)
    except BackendUnavailable as exc:
        if exc.gone:
            return exc.message
        raise
    return None
