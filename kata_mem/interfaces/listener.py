"""Where ``kata-mem serve`` listens, and who may ask: the unix socket (bound by serve, with
the lock beside it that proves a dead socket kata-mem's, or passed by systemd socket
activation), the ``--metrics-address`` TCP listener, and the peer of a connection.

Who may ask: the peer's credentials (``SO_PEERCRED``) are checked on every request
before any of its body is read, root or a member of ``--group``; the socket is created
0660, the group's, in a directory no other user could write (the walk of
:func:`kata_mem.edges.ownership.check_way`, the trust rule of every file kata-mem uses as
root).

``--metrics-address`` adds a TCP listener for Prometheus, which cannot scrape a unix
socket. TCP carries no peer credentials, so its :data:`TCP` port routes only the read-only
endpoints (:mod:`kata_mem.interfaces.service` builds both applications).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import ipaddress
import json
import os
import pwd
import socket
import stat
import struct
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from kata_mem.core.errors import ConfigError
from kata_mem.core.values import Frozen
from kata_mem.edges.locks import same_file
from kata_mem.edges.logs import describe, get_logger
from kata_mem.edges.ownership import check_way, mode, others_could_write, who

# One logger for every line of serve (its modules are one service to an operator).
log = get_logger("kata_mem.interfaces.service")

DEFAULT_SOCKET = "/run/kata-mem/kata-mem.sock"
#: systemd passes activated sockets from this descriptor on (sd_listen_fds(3)).
SD_LISTEN_FDS_START = 3


class Peer(Frozen):
    """A unix socket's client as the kernel saw it connect (``SO_PEERCRED``)."""

    pid: int
    uid: int
    gid: int


class Remote(Frozen):
    """A client of the metrics address: TCP says where it is, not who."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{MetricsAddress(self.host, self.port)} (TCP)"


class Port(Frozen):
    """One of serve's listeners, and what its requests may ask: every request to either
    goes through the same handlers, middleware and error documents."""

    name: str  # the ``listener`` label of ``kata_mem_request_seconds``
    checks_peer: bool  # SO_PEERCRED: only a unix socket has it
    routes: str  # what it serves, for the refusals' messages


UNIX = Port(
    "unix", True, "POST /v1/shim, GET /v1/node, GET /v1/sandboxes/ID, GET /metrics or GET /healthz"
)
TCP = Port(
    "tcp",
    False,
    "GET /metrics or GET /healthz: the metrics address serves those only (the other "
    "endpoints are on the unix socket)",
)


def peer_of(sock: socket.socket) -> Peer:
    """Who is at the other end of a connected unix socket (``SO_PEERCRED``)."""
    fmt = "3i"
    pid, uid, gid = struct.unpack(
        fmt, sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize(fmt))
    )
    return Peer(pid, uid, gid)


def peer_text(peer: Union[Peer, Remote, None]) -> str:
    """A peer as log lines and refusals name it."""
    if isinstance(peer, Remote):
        return str(peer)
    return "an unknown peer" if peer is None else f"uid {peer.uid} gid {peer.gid} pid {peer.pid}"


def remote_of_transport(transport: asyncio.BaseTransport) -> Optional[Remote]:
    """Where a TCP client is (the metrics address)."""
    name = transport.get_extra_info("peername")
    return Remote(str(name[0]), int(name[1])) if isinstance(name, tuple) else None


def peer_of_transport(transport: Optional[asyncio.BaseTransport]) -> Optional[Peer]:
    """Who is at the other end of a unix socket's connection, None once it is gone."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    try:
        return peer_of(sock) if sock is not None else None
    except OSError:  # gone already
        return None


def peer_allowed(peer: Peer, group: Optional[int]) -> bool:
    """Root, or a process of ``group`` (its gid, or a supplementary group of its user)."""
    if peer.uid == 0:
        return True
    if group is None:
        return False
    if peer.gid == group:
        return True
    try:
        user = pwd.getpwuid(peer.uid)
    except KeyError:
        return False
    return group in os.getgrouplist(user.pw_name, user.pw_gid)


def group_id(name: Optional[str]) -> Optional[int]:
    """:raises ConfigError: no such group."""
    if name is None:
        return None
    import grp

    try:
        return grp.getgrnam(name).gr_gid
    except KeyError as exc:
        raise ConfigError(
            f"--group {name!r}: no such group; expected the group whose members may use "
            "the socket (create it, e.g. groupadd --system kata-mem)"
        ) from exc


class MetricsAddress(Frozen):
    """Where ``--metrics-address`` serves ``/metrics`` and ``/healthz`` over TCP."""

    host: str  # an IP address literal
    port: int

    @classmethod
    def parse(cls, text: str) -> MetricsAddress:
        """``PORT`` (loopback, 127.0.0.1) or ``HOST:PORT`` with an IP address as
        ``HOST`` (``[::1]:PORT`` for IPv6). ``:PORT`` is refused: by Go's convention it
        means every interface, by this one it would mean loopback; say which.

        :raises ValueError: saying what was expected.
        """
        host, sep, port = text.rpartition(":")
        if not sep:
            host = "127.0.0.1"
        elif not host:
            raise ValueError(
                f"{text!r}: no host; give 127.0.0.1{text} for loopback, or the address to "
                f"listen on (0.0.0.0{text} for every interface)"
            )
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        elif ":" in host:
            # "::1:9464" is also an IPv6 address with no port: no guessing.
            raise ValueError(f"{text!r}: an IPv6 address goes in brackets, as in [::1]:9464")
        try:
            ipaddress.ip_address(host)
        except ValueError as exc:
            raise ValueError(
                f"{text!r}: {host!r} is not an IP address; expected PORT, HOST:PORT or "
                "[IPV6]:PORT, e.g. 127.0.0.1:9464"
            ) from exc
        if not (port.isascii() and port.isdigit()) or int(port) > 65535:
            raise ValueError(f"{text!r}: {port!r} is not a port; expected 0 to 65535")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def bind_metrics(address: MetricsAddress) -> socket.socket:
    """:raises ConfigError: the address cannot be listened on (in use, not this host's)."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.host, address.port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"--metrics-address {address}: cannot listen there ({exc.strerror or exc}); "
            "nothing was changed"
        ) from exc
    return sock


# --- the listening socket -------------------------------------------------------------


#: A unix socket's path fits ``sun_path`` (108 bytes) with its terminating NUL
#: (unix(7)): Linux binds 108 bytes without one, but clients (curl, Go's net.Dial) refuse it.
MAX_SOCKET_PATH = 107
LOCK_SCHEMA = "kata-mem/serve-lock/v1"


@dataclass
class Listener:
    """The socket the service listens on, and what to undo when it stops."""

    sock: socket.socket
    path: Optional[str] = None  # bound here (not passed by systemd): removed at the end
    inode: Optional[tuple[int, int]] = None
    lock_fd: Optional[int] = None

    def close(self) -> None:
        self.sock.close()
        if self.path is not None:
            with contextlib.suppress(OSError):
                info = os.lstat(self.path)
                if (info.st_dev, info.st_ino) == self.inode:  # not a successor's socket
                    os.unlink(self.path)
        if self.lock_fd is not None:
            _drop_lock(self.lock_fd, f"{self.path}.lock")


def activated(env: MutableMapping[str, str], pid: int) -> Optional[socket.socket]:
    """The socket systemd passed to the process ``pid`` (``LISTEN_PID``, ``LISTEN_FDS``),
    if any. The variables are taken out of ``env`` on every path, as ``sd_listen_fds(1)``
    unsets them "regardless of whether the function call itself succeeded or not"
    (sd_listen_fds(3); systemd src/libsystemd/sd-daemon/sd-daemon.c): they describe
    this process's descriptors, not those of a process it starts with ``env``.

    :raises ConfigError: the passed descriptor is not a listening unix stream socket.
    """
    listen_pid, count = env.get("LISTEN_PID"), env.get("LISTEN_FDS")
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        env.pop(name, None)
    if listen_pid != str(pid) or not count:
        return None
    if count != "1":
        raise ConfigError(
            f"LISTEN_FDS={count}: expected one socket (kata-mem.socket has one ListenStream)"
        )
    try:
        sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    except OSError as exc:
        raise ConfigError(f"LISTEN_FDS=1: descriptor 3 is not a socket ({describe(exc)})") from exc
    if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
        raise ConfigError(
            "LISTEN_FDS=1: descriptor 3 is not a unix stream socket; expected "
            "ListenStream=/run/kata-mem/kata-mem.sock in kata-mem.socket"
        )
    sock.set_inheritable(False)
    return sock


def _live(path: str) -> bool:
    """Whether something accepts connections on the unix socket at ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError as exc:
            # EAGAIN: a full backlog, so someone is listening.
            return exc.errno in (errno.EAGAIN, errno.EACCES) or isinstance(exc, TimeoutError)
    return True


def _lock_names(fd: int) -> Optional[tuple[int, int, int]]:
    """The socket (device, inode, ctime) a lock says its serve made, if it says one."""
    try:
        doc = json.loads(os.pread(fd, 4096, 0))
        made = doc["socket"]
        names = (made["dev"], made["ino"], made["ctime_ns"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if doc.get("schema") != LOCK_SCHEMA or not all(type(n) is int for n in names):
        return None
    return names


def _write_lock(fd: int, info: os.stat_result) -> None:
    """Record in the held lock this process and the socket it made: what lets the next
    serve, after a crash, prove that the dead socket there is kata-mem's own."""
    doc = {
        "schema": LOCK_SCHEMA,
        "pid": os.getpid(),
        "socket": {"dev": info.st_dev, "ino": info.st_ino, "ctime_ns": info.st_ctime_ns},
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(doc) + "\n").encode(), 0)
    os.fsync(fd)


def _drop_lock(fd: int, lock: str) -> None:
    """Remove the lock this process holds (and made, or adopted from a dead serve)."""
    if same_file(fd, lock):
        with contextlib.suppress(OSError):
            os.unlink(lock)
    os.close(fd)


def _open_lock(lock: str, where: str) -> Optional[int]:
    """The existing lock beside the socket, opened and held, when it is kata-mem's: a
    regular file of this user's that no one else may write (checked on the descriptor,
    never by path). None when there is none.

    :raises ConfigError: it is someone else's, or another serve holds it.
    """
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symlink; EISDIR; ENXIO: a socket
        raise ConfigError(
            f"{where}: {lock} is not a lock kata-mem serve made ({exc.strerror or exc}); "
            "nothing was changed (remove it, or give another --socket)"
        ) from exc
    try:
        info = os.fstat(fd)
        # The rule of every file kata-mem uses as root (kata_mem.edges.ownership).
        why = (
            "not a regular file"
            if not stat.S_ISREG(info.st_mode)
            else f"owned by {who(info.st_uid)}, mode {mode(info)}"
            if others_could_write(info)
            else f"{info.st_nlink} links to one file"
            if info.st_nlink != 1
            else ""
        )
        if why:
            raise ConfigError(
                f"{where}: {lock} is {why}: not a lock kata-mem serve made; nothing was "
                "changed (remove it, or give another --socket)"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise ConfigError(
                f"{where}: another kata-mem serve is running on it (it holds {lock}); "
                "stop it first, or give another --socket"
            ) from exc
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clear_path(path: str, where: str, lock: str, held: Optional[int]) -> None:
    """Make room for the socket: nothing there and no lock beside it, or a dead socket
    that the lock beside it (``held``, open and flocked) names, which is removed. A lock
    that names no socket there is not adopted: it proves nothing is kata-mem's (another
    program's ``PATH.lock``, or a lock whose socket is gone), and serve would overwrite
    it and remove it at its stop. Anything else is left as it is.

    :raises ConfigError: something else is at ``path``, or a lock that proves nothing.
    """
    names = None if held is None else _lock_names(held)
    try:
        info = os.lstat(path)
    except FileNotFoundError as exc:
        if held is None:
            return
        what = (
            "does not hold what kata-mem serve writes in its lock"
            if names is None
            else "names a socket that is no longer there"
        )
        raise ConfigError(
            f"{where}: {lock} is there without a socket beside it, and {what}: it is not a "
            "lock this serve can prove kata-mem's, so nothing was changed (remove it if it "
            "is a stale kata-mem lock, or give another --socket)"
        ) from exc
    if not stat.S_ISSOCK(info.st_mode):
        raise ConfigError(
            f"{where}: exists and is not a socket; nothing was changed (remove it, or give "
            "another --socket)"
        )
    if _live(path):
        raise ConfigError(
            f"{where}: something is already listening on it (a kata-mem.socket unit, or "
            "another service); nothing was changed"
        )
    if names is None or names != (info.st_dev, info.st_ino, info.st_ctime_ns):
        beside = (
            f"no {lock} beside it"
            if held is None
            else f"{lock} does not name it"
            if names is not None
            else f"{lock} is not a lock kata-mem serve wrote"
        )
        raise ConfigError(
            f"{where}: a socket nobody listens on, but not one kata-mem serve made ({beside}); "
            "nothing was changed (remove it, or give another --socket)"
        )
    os.unlink(path)  # stale: a previous kata-mem serve's, its process gone
    log.warning("%s: replaced a stale socket (nobody was listening)", path)


def bind(path: str, group: Optional[int]) -> Listener:
    """Listen on ``path``: 0660, owned by this process's user and ``group``.

    A socket file nobody listens on (left by a crash) is replaced when the lock beside
    it proves it kata-mem's; nothing else is. A refusal changes nothing on disk: the
    lock is made only once every check has passed.

    :raises ConfigError: another instance listens there, the path is not a socket, is too
        long, lies where another user could write, or cannot be created.
    """
    where = f"--socket {path}"
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH:
        raise ConfigError(
            f"{where}: {size} bytes; a unix socket path is at most {MAX_SOCKET_PATH} bytes "
            "(unix(7)); nothing was changed (give a shorter path)"
        )
    parent = os.path.dirname(os.path.abspath(path))
    made = False
    if not os.path.isdir(parent):
        if path != DEFAULT_SOCKET:
            # A mistyped --socket must not leave directories behind.
            raise ConfigError(
                f"{where}: its directory {parent} does not exist; nothing was created "
                "(create it, or give another --socket)"
            )
        try:
            os.mkdir(parent, 0o755)
            made = True
            os.chmod(parent, 0o755)  # the shims' group must reach the socket, whatever the umask
        except FileExistsError:
            pass
        except OSError as exc:
            raise ConfigError(f"{where}: cannot create {parent} ({exc.strerror or exc})") from exc
    try:
        # Another user able to write a directory on the way could swap the socket or its
        # lock between these checks and their use.
        check_way(Path(parent), where, "the socket and its lock", itself=True)
        if group is not None:
            _check_group_reaches(parent, group, where)
        for _ in range(3):
            listener = _bind_once(path, group, where)
            if listener is not None:
                return listener
        raise ConfigError(f"{where}: {path}.lock changed while serve looked at it; try again")
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(parent)
        raise


def _check_group_reaches(parent: str, group: int, where: str) -> None:
    """Every directory above the socket lets ``group`` search it (its ``x`` bit for the
    group that owns it, or for others): else the socket's group could never connect, and
    every shim of theirs would fail on a socket that serve reports as up. A state
    directory is 0700 (kata_mem.edges.statedir), so the default socket in it needs this.
    A directory with an ACL is not judged from its mode.

    :raises ConfigError: naming the directory, its mode, owner and group.
    """
    for start in dict.fromkeys((os.path.abspath(parent), os.path.realpath(parent))):
        here = start
        while True:
            info = os.stat(here)
            searchable = info.st_mode & 0o001 or (info.st_gid == group and info.st_mode & 0o010)
            if not searchable and not _has_acl(here):
                raise ConfigError(
                    f"{where}: --group {_group_name(group)}: {here} is mode "
                    f"{stat.S_IMODE(info.st_mode):04o} (owner {who(info.st_uid)}, group "
                    f"{_group_name(info.st_gid)}), which the group cannot search, so its "
                    "members could not reach the socket; nothing was changed (let the group "
                    f"search it: chgrp {_group_name(group)} {here} && chmod g+x {here}; or "
                    "give a --socket in a directory they can reach)"
                )
            if here == os.path.dirname(here):
                break
            here = os.path.dirname(here)


def _has_acl(path: str) -> bool:
    try:
        os.getxattr(path, "system.posix_acl_access")
    except OSError:
        return False
    return True


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _bind_once(path: str, group: Optional[int], where: str) -> Optional[Listener]:
    """:func:`bind`, or None when the lock came or went meanwhile (look again)."""
    lock = f"{path}.lock"
    lock_fd = _open_lock(lock, where)
    made_lock = lock_fd is None
    try:
        if lock_fd is not None and not same_file(lock_fd, lock):
            os.close(lock_fd)  # removed by the serve that was stopping as we opened it
            return None
        _clear_path(path, where, lock, lock_fd)
        if lock_fd is None:
            try:
                lock_fd = os.open(
                    lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
                )
            except FileExistsError:
                return None
            except OSError as exc:
                raise ConfigError(f"{where}: cannot create {lock} ({exc.strerror or exc})") from exc
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                os.close(lock_fd)  # another serve opened it first: its lock now
                lock_fd, made_lock = None, False
                raise ConfigError(
                    f"{where}: another kata-mem serve is starting on it (it holds {lock}); "
                    "stop it first, or give another --socket"
                ) from exc
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # never reachable by others, not even between bind and chmod
        try:
            sock.bind(path)
        except OSError as exc:
            sock.close()
            raise ConfigError(f"{where}: cannot listen there ({exc.strerror or exc})") from exc
        finally:
            os.umask(old)
        try:
            if group is not None:
                os.chown(path, -1, group)
            os.chmod(path, 0o660)
            info = os.lstat(path)
            _write_lock(lock_fd, info)
        except OSError as exc:
            sock.close()
            os.unlink(path)
            raise ConfigError(
                f"{where}: cannot give it mode 0660 and the group, or record it in {lock} "
                f"({exc.strerror or exc})"
            ) from exc
        return Listener(sock, path, (info.st_dev, info.st_ino), lock_fd)
    except BaseException:
        if lock_fd is not None:
            if made_lock:
                _drop_lock(lock_fd, lock)  # made by this call: a refusal leaves nothing
            else:
                os.close(lock_fd)
        raise


def check_not_in_state_dir(path: str, state_dir: str) -> None:
    """A socket in the state directory must have the name kata-mem keeps there: any
    other entry would make the directory someone else's to the next apply.

    :raises ConfigError: it has another name.
    """
    from kata_mem.core.model import SERVICE_ENTRIES

    with contextlib.suppress(OSError):  # no state directory yet: nothing to share
        parent = os.path.dirname(os.path.abspath(path))
        if os.path.basename(path) != SERVICE_ENTRIES[0] and os.path.samefile(parent, state_dir):
            raise ConfigError(
                f"--socket {path}: lies in the state directory {state_dir}, where a socket "
                f"must be named {SERVICE_ENTRIES[0]} (kata-mem keeps nothing else there "
                "besides its sandboxes); nothing was changed (rename it, or give another "
                "directory)"
            )
