"""``kata-mem serve``: the node service, HTTP/1.1 on a unix socket (aiohttp).

One resident process answers every runtime shim of the node, so a container event
costs a request on an open socket instead of a Python start-up. What it answers is
what the one-shot commands print: ``POST /v1/shim`` runs :func:`kata_mem.interfaces.shim.answer`
(the body ``kata-mem shim`` prints, byte for byte), ``GET /v1/node`` is ``status --all
--json``, ``GET /v1/sandboxes/{id}`` is ``status --json``.

:func:`~kata_mem.orchestration.handle.handle` is synchronous and may wait seconds for a guest, so it
runs in a thread pool; an asyncio lock per sandbox keeps one sandbox's requests in
order (the journal's flock still orders them against CLI calls), and different
sandboxes run side by side. The event loop itself only reads bodies, checks the
peer and writes answers, so a slow guest delays no other sandbox.

A loop of its own (every ``--reconcile-interval``) does what the ``kata-mem reconcile``
timer did, for the sandboxes whose journal asks for it: a deferred shrink whose retry
time has come, a DIMM unplug still pending, a step a crash cut short, a VM that is
gone. Each visit takes the sandbox's lock and a pool thread, as a request does.

Who may ask: the peer's credentials (``SO_PEERCRED``) are checked on every request
before any of its body is read, root or a member of ``--group``; the socket is created
0660, the group's. Every refusal is a ``kata-mem/error/v1`` document and one log line.

``--metrics-address`` adds a TCP listener for Prometheus, which cannot scrape a unix
socket: ``GET /metrics`` and ``GET /healthz`` only, read-only. TCP carries no peer
credentials, so nothing that changes a VM or shows one's state is routed there.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import ipaddress
import json
import logging
import os
import pwd
import resource
import signal
import socket
import stat
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, TypeVar, Union, cast

from aiohttp import HttpVersion11, web
from aiohttp.http_exceptions import HttpProcessingError

from kata_mem import __version__
from kata_mem.core.errors import BackendUnavailable, ConfigError, InputError, KataMemError
from kata_mem.core.model import Settings, Unseen, check_sandbox_id
from kata_mem.core.request import MAX_REQUEST_BYTES, CallOptions, SandboxRequest
from kata_mem.core.results import Applied, Planned
from kata_mem.core.units import to_mib_floor
from kata_mem.edges.logs import describe, get_logger
from kata_mem.interfaces import render
from kata_mem.interfaces.metrics import CONTENT_TYPE, Metrics
from kata_mem.interfaces.protocol import Answer, answer, parse

log = get_logger("kata_mem.interfaces.service")
T = TypeVar("T")

DEFAULT_SOCKET = "/run/kata-mem/kata-mem.sock"
#: systemd passes activated sockets from this descriptor on (sd_listen_fds(3)).
SD_LISTEN_FDS_START = 3
#: An idle connection (none sent, or between requests) and a body that does not
#: arrive are cut after this long (``--idle-timeout``).
IDLE_TIMEOUT_S = 10.0
#: ``GET /v1/sandboxes/{id}`` asks the VM; this bounds how long it may take.
STATUS_TIMEOUT_S = 10.0
#: On SIGTERM, how long requests in flight may still take (a resize is several steps of
#: at most ``step_timeout_s`` each); the unit's TimeoutStopSec is longer.
SHUTDOWN_TIMEOUT_S = 120.0
#: Threads for requests: each may wait for a guest, so more than the CPUs.
WORKERS = 64
#: A request body up to this size is parsed, and when plan-only planned, on the loop
#: (well under a millisecond for a usual request of a few containers); a larger one in
#: a thread, so that its CPU time does not hold up every other request.
INLINE_BODY_BYTES = 64 << 10
#: Seconds between two passes of the reconcile loop (``--reconcile-interval``).
RECONCILE_INTERVAL_S = 5.0
#: How often the loop checks the node's ledger against the journals (and mends it).
LEDGER_CHECK_S = 60.0
#: Sandboxes the loop visits at once; the rest of the pool stays for requests.
RECONCILE_WORKERS = 8
#: Where HTTP statuses come from: the one-shot shim's exit code (docs, "Exit codes").
_STATUS = {0: 200, 1: 500, 2: 400, 3: 400, 4: 400, 6: 503, 7: 503, 8: 503, 9: 503}


def http_status(exit_code: int) -> int:
    """The HTTP status of an answer whose one-shot exit code is ``exit_code``."""
    return _STATUS.get(exit_code, 500)


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int


@dataclass(frozen=True)
class Remote:
    """A client of the metrics address: TCP says where it is, not who."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{MetricsAddress(self.host, self.port)} (TCP)"


@dataclass(frozen=True)
class Port:
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


@dataclass(frozen=True)
class MetricsAddress:
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


def activated(env: Mapping[str, str]) -> Optional[socket.socket]:
    """The socket systemd passed (``LISTEN_FDS``/``LISTEN_PID``), if any.

    :raises ConfigError: the passed descriptor is not a listening unix stream socket.
    """
    count = env.get("LISTEN_FDS")
    if env.get("LISTEN_PID") != str(os.getpid()) or not count:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)  # not for the processes this one starts
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


def _who(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _foreign(info: os.stat_result, sticky_ok: bool) -> str:
    """Why another user could have written (or could replace entries of) the file or
    directory ``info`` describes, or "" when only root and this process's user could."""
    if info.st_uid not in (0, os.geteuid()):
        return f"owned by {_who(info.st_uid)}, not by root or this user"
    if stat.S_ISLNK(info.st_mode):
        return ""  # a symlink's own mode means nothing; its owner and directory are checked
    who = " and ".join(w for bit, w in ((0o020, "group"), (0o002, "others")) if info.st_mode & bit)
    if who and not (sticky_ok and info.st_mode & stat.S_ISVTX):
        mode = stat.S_IMODE(info.st_mode)
        return f"writable by {who} (mode {mode:04o})" + (
            " without the sticky bit" if sticky_ok else ""
        )
    return ""


def _check_socket_dirs(parent: str, where: str) -> None:
    """The socket's directory and every one above it (as written and resolved, symlinks
    included) belong to root or this user and no one else may write them, unless sticky
    as ``/tmp`` is (then no one may remove or rename another user's entries): otherwise
    another user could swap the socket or its lock between these checks and their use
    (the walk of OpenSSH's ``safe_path``, auth.c, which sshd's StrictModes uses).

    :raises ConfigError: naming the directory, its owner or mode.
    """
    seen: set[str] = set()
    for start in (os.path.abspath(parent), os.path.realpath(parent)):
        here = start
        while here not in seen:
            seen.add(here)
            try:
                info = os.lstat(here)
            except OSError as exc:
                raise ConfigError(
                    f"{where}: cannot check {here} ({exc.strerror or exc}); nothing was changed"
                ) from exc
            why = _foreign(info, sticky_ok=True)
            if why:
                raise ConfigError(
                    f"{where}: {here}: {why}: another user could replace the socket or its "
                    "lock there; nothing was changed (use a directory only root can write, "
                    "such as /run/kata-mem)"
                )
            here = os.path.dirname(here)


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


def _same_file(fd: int, path: str) -> bool:
    with contextlib.suppress(OSError):
        a, b = os.fstat(fd), os.lstat(path)
        return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    return False


def _drop_lock(fd: int, lock: str) -> None:
    """Remove the lock this process holds (and made, or adopted from a dead serve)."""
    if _same_file(fd, lock):
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
        why = "not a regular file" if not stat.S_ISREG(info.st_mode) else _foreign(info, False)
        if not why and info.st_nlink != 1:
            why = f"{info.st_nlink} links to one file"
        if info.st_uid != os.geteuid() and not why:
            why = f"owned by {_who(info.st_uid)}, not by this user"
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
        _check_socket_dirs(parent, where)
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
                    f"{stat.S_IMODE(info.st_mode):04o} (owner {_user_name(info.st_uid)}, group "
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


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _bind_once(path: str, group: Optional[int], where: str) -> Optional[Listener]:
    """:func:`bind`, or None when the lock came or went meanwhile (look again)."""
    lock = f"{path}.lock"
    lock_fd = _open_lock(lock, where)
    made_lock = lock_fd is None
    try:
        if lock_fd is not None and not _same_file(lock_fd, lock):
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


def _raise_open_files() -> None:
    """Room for many idle connections: the soft limit of open files up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, 65536), hard))


# --- the application --------------------------------------------------------------------


def _json(doc: dict[str, Any], status: int, exit_code: Optional[int] = None) -> web.Response:
    # As `kata-mem shim` prints it: one line of JSON.
    resp = web.Response(
        body=(json.dumps(doc) + "\n").encode(), status=status, content_type="application/json"
    )
    if exit_code is not None:
        resp.headers["X-Kata-Mem-Exit-Code"] = str(exit_code)
    return resp


def _peer_text(peer: Union[Peer, Remote, None]) -> str:
    if isinstance(peer, Remote):
        return str(peer)
    return "an unknown peer" if peer is None else f"uid {peer.uid} gid {peer.gid} pid {peer.pid}"


def _remote_of_transport(transport: asyncio.BaseTransport) -> Optional[Remote]:
    name = transport.get_extra_info("peername")
    return Remote(str(name[0]), int(name[1])) if isinstance(name, tuple) else None


def _peer_of_transport(transport: Optional[asyncio.BaseTransport]) -> Optional[Peer]:
    sock = transport.get_extra_info("socket") if transport is not None else None
    try:
        return peer_of(sock) if sock is not None else None
    except OSError:  # gone already
        return None


def _parse_error(exc: Optional[BaseException], message: Optional[str] = None) -> str:
    """What aiohttp's parser said, on one line: its messages span lines and point at
    the byte with a line of carets; a payload error wraps the parser's."""
    if isinstance(exc, web.RequestPayloadError) and exc.__cause__ is not None:
        exc = exc.__cause__
    text = message or getattr(exc, "message", None) or str(exc or "")
    return " ".join(w for w in str(text).split() if w.strip("^~")) or "malformed"


async def _expect_later(request: web.Request) -> None:
    """An Expect header is answered after the peer check (``Service._guard``)."""


def _expectations(request: web.Request) -> list[str]:
    """The request's expectations, lower case (every Expect header, each a list)."""
    return [e.strip().lower() for h in request.headers.getall("Expect", []) for e in h.split(",")]


async def _unrouted(request: web.Request) -> web.StreamResponse:
    """A path or method no endpoint takes: 405 when another method of the path is one,
    else 404, as aiohttp's router says."""
    allowed: set[str] = set()
    for endpoint in request.app.router.resources():
        if endpoint.name is not None:  # the endpoints are named; this route is not
            allowed |= (await endpoint.resolve(request))[1]
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    raise web.HTTPNotFound()


class _Protocol(web.RequestHandler):
    """aiohttp's connection handler, answering what aiohttp refuses before any handler
    runs (a request line, header or chunk it cannot parse) and a handler's bug as the
    handlers answer: a ``kata-mem/error/v1`` document and one log line. aiohttp's own
    answer is plain text, logged at ERROR with a traceback
    (``aiohttp.web_protocol.RequestHandler.handle_error``, "Error handling request")."""

    def __init__(self, service: Service, manager: web.Server, port: Port, **options: Any) -> None:
        super().__init__(manager, **options)
        self.service = service
        self.port = port
        self.peer: Union[Peer, Remote, None] = None
        self._first_request: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # SO_PEERCRED is the peer as it connected: read once, for every request it sends.
        # TCP has none: the address, for the log.
        checked = self.port.checks_peer
        self.peer = _peer_of_transport(transport) if checked else _remote_of_transport(transport)
        super().connection_made(transport)
        # aiohttp's keep-alive timer starts after a response, and before 3.14 nothing
        # closed a connection that never sent a byte: that is cut here, on every version.
        self._first_request = asyncio.get_running_loop().call_later(
            self.service.idle_timeout, transport.close
        )

    def data_received(self, data: bytes) -> None:
        if self._first_request is not None:
            self._first_request.cancel()
            self._first_request = None
        super().data_received(data)

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        if self._first_request is not None:
            self._first_request.cancel()
            self._first_request = None
        super().connection_lost(exc)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: Optional[BaseException] = None,
        message: Optional[str] = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: an answer is under way, cut it
            raise ConnectionError("a response was being sent when the request failed")
        peer = self.peer
        if self.transport is None or isinstance(exc, ConnectionError):
            log.warning(
                "a request from %s: the connection closed before it was answered (%s)",
                _peer_text(peer),
                describe(exc) if exc else status,
            )
            return web.Response(status=status)  # no one is left to read it
        if self.port.checks_peer and not self.service.allowed(peer):
            return self.service.forbidden(peer, "a request")
        if status >= 500:
            error = KataMemError(
                f"internal error answering the request ({describe(exc) if exc else status}); "
                "a bug in kata-mem"
            )
            resp = self.service.refuse(error, status, peer, "a request", cause=exc)
        else:
            text = _parse_error(exc, message)
            error = InputError(f"HTTP request: {text}; expected HTTP/1.1 with {self.port.routes}")
            resp = self.service.refuse(error, status, peer, "a request")
        resp.force_close()
        return resp


class Service:
    """The handlers and what they share: the thread pool, the sandbox locks, the metrics."""

    def __init__(
        self,
        state_dir: str,
        settings: Settings,
        group: Optional[int],
        env: Mapping[str, str],
        idle_timeout: float = IDLE_TIMEOUT_S,
        reconcile_interval: float = RECONCILE_INTERVAL_S,
        default_config: Optional[str] = None,
    ) -> None:
        self.state_dir = state_dir
        #: ``serve --config``, absolute: the configuration of a request whose ``config`` is
        #: null (else where Kata looks, as ``kata-mem shim`` does).
        self.default_config = default_config
        self.reconcile_interval = reconcile_interval
        self.settings = settings
        self.group = group
        self.env = dict(env)
        self.idle_timeout = idle_timeout
        self.pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="kata-mem-serve")
        self.metrics = Metrics(state_dir)
        # sandbox id -> its lock and how many requests hold or wait for it
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        # why the last reconcile pass could not read the state directory
        self._unusable: Optional[str] = None
        # when the loop last checked the node's ledger against the journals (monotonic)
        self._ledger_checked = -LEDGER_CHECK_S
        # sandbox id -> why its last resize could not see QEMU's host cgroup (/healthz)
        self.unseen: dict[str, Unseen] = {}

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_REQUEST_BYTES)
        # aiohttp answers an Expect header before any middleware runs, so before the peer
        # check, in plain text (web_app ``Application._handle``, its default
        # ``_default_expect_handler``): 100 Continue invites a refused peer's body, and
        # anything else is its own 417. So no route takes it there (``_guard`` does), and
        # every path and method has a route, the last one answering as the router would
        # (404, 405): a path no route takes would get aiohttp's handler again.
        later = _expect_later
        app.router.add_post("/v1/shim", self.shim, name="shim", expect_handler=later)
        app.router.add_get("/v1/node", self.node, name="node", expect_handler=later)
        app.router.add_get("/v1/sandboxes/{id}", self.sandbox, name="sandbox", expect_handler=later)
        app.router.add_get("/metrics", self.metrics_text, name="metrics", expect_handler=later)
        app.router.add_get("/healthz", self.healthz, name="healthz", expect_handler=later)
        app.router.add_route("*", "/{path:.*}", _unrouted, expect_handler=later)
        return app

    def metrics_app(self) -> web.Application:
        """What ``--metrics-address`` serves: the two read-only endpoints, nothing else,
        through the same middleware as the unix socket's (``_guard``, with no peer check:
        TCP has no credentials) and as ``app`` routes them."""
        app = web.Application(middlewares=[self._guard], client_max_size=MAX_REQUEST_BYTES)
        later = _expect_later
        app.router.add_get("/metrics", self.metrics_text, name="metrics", expect_handler=later)
        app.router.add_get("/healthz", self.healthz, name="healthz", expect_handler=later)
        app.router.add_route("*", "/{path:.*}", _unrouted, expect_handler=later)
        return app

    def allowed(self, peer: Union[Peer, Remote, None]) -> bool:
        """Whether the unix socket's peer may ask (root, or a member of ``--group``)."""
        return isinstance(peer, Peer) and peer_allowed(peer, self.group)

    def refuse(
        self,
        exc: KataMemError,
        status: int,
        peer: Union[Peer, Remote, None],
        what: str,
        cause: Optional[BaseException] = None,
    ) -> web.Response:
        """A request refused by the service itself (:func:`answer` logs its own): the
        error document, and one log line (with the traceback of a bug, ``cause``)."""
        level = logging.ERROR if status >= 500 else logging.WARNING
        log.log(
            level, "%s from %s: %d: %s", what, _peer_text(peer), status, exc.message, exc_info=cause
        )
        self.metrics.count_error(exc)
        return _json(render.error_json(exc), status, exc.exit_code)

    def forbidden(self, peer: Union[Peer, Remote, None], what: str) -> web.Response:
        """403 for a peer that may not ask; the connection is closed, its body unread."""
        group = "" if self.group is None else f" or members of its --group (gid {self.group})"
        resp = self.refuse(
            InputError(
                f"peer {_peer_text(peer)}: not allowed; kata-mem serve answers root{group} "
                "(see its --group)"
            ),
            403,
            peer,
            what,
        )
        resp.force_close()
        return resp

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)

    @contextlib.asynccontextmanager
    async def _serialized(self, sandbox: Optional[str]) -> AsyncIterator[None]:
        if sandbox is None:
            yield
            return
        lock, users = self._locks.setdefault(sandbox, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[sandbox]

    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        start = time.perf_counter()
        route = request.match_info.route.name or "other"
        what = f"{request.method} {request.path}"
        protocol = cast(_Protocol, request.protocol)
        peer, port = protocol.peer, protocol.port
        # The peer first: nothing of a refused peer's request is read or decoded.
        expected = _expectations(request)
        if port.checks_peer and not self.allowed(peer):
            response: web.StreamResponse = self.forbidden(peer, what)
            request.content.feed_eof()  # not even drained: closed once the 403 is sent
        elif any(e != "100-continue" for e in expected):
            # RFC 9110, 10.1.1: an expectation the server cannot meet is a 417.
            response = self.refuse(
                InputError(
                    f"Expect {', '.join(request.headers.getall('Expect'))!r}: not an "
                    "expectation kata-mem serve meets; send none, or 100-continue"
                ),
                417,
                peer,
                what,
            )
            response.force_close()
            request.content.feed_eof()  # the body is not read
        else:
            request["peer"] = peer
            # 100 Continue once the body is about to be read (``_body``), never before;
            # so never on the metrics address, whose endpoints read none.
            request["continue"] = bool(expected) and request.version >= HttpVersion11
            try:
                response = await handler(request)
            except web.HTTPException as exc:  # the router's 404 and 405, as documents
                response = self.refuse(
                    InputError(f"{what}: {exc.reason}; expected {port.routes}"),
                    exc.status,
                    peer,
                    what,
                )
                if isinstance(exc, web.HTTPMethodNotAllowed):  # RFC 9110, 15.5.6
                    response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        self.metrics.latency.labels(route, port.name).observe(time.perf_counter() - start)
        return response

    async def _body(self, request: web.Request) -> Optional[bytes]:
        """The body, or None when it is larger than a request may be."""
        if (request.content_length or 0) > MAX_REQUEST_BYTES:
            return None
        if request.get("continue"):
            # What aiohttp's _default_expect_handler writes; no response has started yet.
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0
        chunks: list[bytes] = []
        size = 0
        while chunk := await request.content.read(1 << 16):
            size += len(chunk)
            if size > MAX_REQUEST_BYTES:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    async def shim(self, request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        peer, what = request.get("peer"), f"{request.method} {request.path}"
        # Every Content-Encoding header, each a list of codings (RFC 9110, 8.4 and 5.3).
        codings = request.headers.getall("Content-Encoding", [])
        coding = ", ".join(c.strip() for c in codings)
        if any(c.strip().lower() not in ("", "identity") for h in codings for c in h.split(",")):
            # A request is a small document on a local socket: nothing to gain from
            # compression, and no decoder to feed what a client chose. 415 with the
            # codings accepted, as RFC 9110 (sections 15.5.16 and 12.5.3) asks.
            resp = self.refuse(
                InputError(
                    f"request body: Content-Encoding {coding!r}: not accepted; send the body "
                    "as it is (no Content-Encoding, or identity)"
                ),
                415,
                peer,
                what,
            )
            resp.headers["Accept-Encoding"] = "identity"
            resp.force_close()  # the body is not read
            return resp
        try:
            if request.content.is_eof() and not request.get("continue"):
                # The whole body came with the headers (a shim's small request): nothing to
                # wait for, and wait_for's task and timer were a sixth of a plan-only answer.
                body = await self._body(request)
            else:
                body = await asyncio.wait_for(self._body(request), self.idle_timeout)
        except asyncio.TimeoutError:
            resp = self.refuse(
                InputError(
                    f"request body: not received within {self.idle_timeout:g} s; send the "
                    "whole request at once"
                ),
                408,
                peer,
                what,
            )
            resp.force_close()
            return resp
        except (web.RequestPayloadError, HttpProcessingError) as exc:  # a chunk it cannot parse
            resp = self.refuse(
                InputError(f"request body: {_parse_error(exc)}; expected an HTTP/1.1 body"),
                400,
                peer,
                what,
            )
            resp.force_close()  # what follows it is not a request
            # Nothing more of it is read: aiohttp would linger to drain it, meet the
            # same error again and log it with a traceback (web_protocol's start()).
            request.content.feed_eof()
            return resp
        if body is None:
            # Refused before it is read, as the HTTP layer's other refusals: an error document.
            too_large = InputError(f"request larger than {MAX_REQUEST_BYTES} bytes")
            resp = self.refuse(too_large, 413, peer, what)
            resp.force_close()  # the rest of the body is not read
            return resp
        # Parsed once, here: what follows reads the typed request. A small plan-only
        # request waits for no VM, no lock and no guest, and a thread hop would be most
        # of its cost; a large one is CPU work the loop would not answer others during
        # (a second for a 1 MiB one with 19,000 containers, /healthz included).
        inline = len(body) <= INLINE_BODY_BYTES
        parsed = parse(body) if inline else await self._run(lambda: parse(body))
        if not isinstance(parsed, SandboxRequest):
            return self.send(parsed)
        if parsed.config is None and self.default_config is not None:
            parsed = replace(parsed, config=self.default_config)
        options = CallOptions(state_dir=self.state_dir)
        async with self._serialized(parsed.sandbox):
            if parsed.mode == "plan" and inline:
                done = answer(parsed, self.env, options)
            else:
                done = await self._run(lambda: answer(parsed, self.env, options))
        log_answer(parsed, done, _peer_text(peer), time.perf_counter() - start)
        return self.send(done)

    def send(self, done: Answer, status: Optional[int] = None) -> web.Response:
        """A shim answer, counted from its typed response or error, rendered once."""
        self.metrics.count_answer(done)
        if isinstance(done.response, Applied):
            self.saw(done.response.sandbox, done.response.plan.memory.host_cgroup_unseen)
        code = done.exit_code
        return _json(done.document(), status or http_status(code), code)

    async def node(self, request: web.Request) -> web.StreamResponse:
        from kata_mem.orchestration.status import node_status

        def read() -> dict[str, Any]:
            return render.node_status_json(node_status(self.settings, self.state_dir))

        try:
            return _json(await self._run(read), 200)
        except KataMemError as exc:
            return self._failed(request, exc)

    async def sandbox(self, request: web.Request) -> web.StreamResponse:
        from kata_mem.orchestration.status import NoEndpoint, read_status, saved_endpoint

        sandbox = request.match_info["id"]
        try:
            check_sandbox_id(sandbox)
            found = await self._run(lambda: saved_endpoint(self.state_dir, sandbox))
            if isinstance(found, NoEndpoint):
                return self._failed(request, InputError(found.describe()), 404)
            try:
                doc = await asyncio.wait_for(
                    self._run(
                        lambda: render.status_json(
                            read_status(found, sandbox, self.state_dir, self.env)
                        )
                    ),
                    STATUS_TIMEOUT_S,
                )
            except asyncio.TimeoutError as exc:
                raise BackendUnavailable(
                    f"sandbox {sandbox}: {found.describe()} did not answer within "
                    f"{STATUS_TIMEOUT_S:g} s (a resize may be holding its monitor); try again"
                ) from exc
        except KataMemError as exc:
            return self._failed(request, exc)
        return _json(doc, 200)

    def _failed(
        self, request: web.Request, exc: KataMemError, status: Optional[int] = None
    ) -> web.Response:
        return self.refuse(
            exc,
            status or http_status(exc.exit_code),
            request.get("peer"),
            f"{request.method} {request.path}",
        )

    # --- the reconcile loop ------------------------------------------------------------

    async def reconcile_loop(self, stop: asyncio.Event) -> None:
        """A pass every ``reconcile_interval`` seconds until ``stop``; a pass under way
        is finished (its visits are steps in flight), never cut."""
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.reconcile_interval)
            if stop.is_set():
                return
            try:
                await self.reconcile_pass()
            except Exception as exc:  # a bug: logged, and the next pass tries again
                log.error("reconcile pass failed: %s", describe(exc))

    async def reconcile_pass(self) -> None:
        """Visit each sandbox of the state directory whose journal asks for it.

        A sandbox a request holds is left to that request (it reconciles first as
        well) and visited on a later pass.
        """
        from kata_mem.edges.statedir import list_state_dir

        try:
            names = await self._run(lambda: list_state_dir(self.state_dir).sandboxes)
        except KataMemError as exc:
            if exc.message != self._unusable:  # said once, not every pass (/healthz says it too)
                log.warning("reconcile: %s", exc.message)
            self._unusable = exc.message
            return
        self._unusable = None
        room = asyncio.Semaphore(RECONCILE_WORKERS)

        async def one(sandbox: str) -> None:
            async with room:
                if sandbox in self._locks:
                    return
                async with self._serialized(sandbox):
                    await self._visit(sandbox)

        await asyncio.gather(*(one(name) for name in names))
        if time.monotonic() - self._ledger_checked >= LEDGER_CHECK_S:
            # Reads every journal under the node lock: not every pass.
            from kata_mem.orchestration.reconcile import mend_ledger

            self._ledger_checked = time.monotonic()
            await self._run(lambda: mend_ledger(self.state_dir))

    async def _visit(self, sandbox: str) -> None:
        from kata_mem.orchestration.reconcile import visit

        done = await self._run(lambda: visit(self.state_dir, sandbox, self.env, due_only=True))
        self.metrics.count_visit(done.action, done.outcome, done.unseen)
        if done.action == "retried" and done.outcome is not None:
            self.saw(sandbox, done.unseen)
        elif done.action == "cleaned":
            self.saw(sandbox, None)
        if done.action == "idle":
            return
        level = logging.WARNING if done.action == "failed" else logging.INFO
        log.log(level, "reconcile: sandbox %s: %s: %s", sandbox, done.action, done.detail)
        for note in done.notes:
            log.warning("reconcile: sandbox %s: %s", sandbox, note.text)

    async def metrics_text(self, request: web.Request) -> web.StreamResponse:
        body = await self._run(self.metrics.text)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE
        return resp

    def saw(self, sandbox: str, unseen: Optional[Unseen]) -> None:
        """Keep whether the sandbox's last resize could see QEMU's host cgroup; a change
        is logged once, not at every answer."""
        before = self.unseen.get(sandbox)
        if unseen is None:
            if self.unseen.pop(sandbox, None) is not None:
                log.info("sandbox %s: the host cgroup guard sees QEMU's cgroup again", sandbox)
        elif before != unseen:
            self.unseen[sandbox] = unseen
            log.warning(
                "sandbox %s: host cgroup unseen (%s), grows are held: %s",
                sandbox,
                unseen.reason,
                unseen.detail,
            )
        self.metrics.unseen_now.set(len(self.unseen))

    async def healthz(self, request: web.Request) -> web.StreamResponse:
        """ok while the state directory can be used: kata-mem's, empty, or not made yet
        (the first apply makes it); checked each time (a stat and a listing). degraded
        (still 200: restarting the pod would not mend it) while a sandbox's last resize
        could not see QEMU's host cgroup, with each sandbox and why."""
        from kata_mem.edges.statedir import state_dir_state

        try:
            await self._run(lambda: state_dir_state(self.state_dir))
        except KataMemError as exc:
            # Not logged: probes ask every few seconds, and the answer says why.
            self.metrics.count_error(exc)
            return _json(render.error_json(exc), 503, exc.exit_code)
        if self.unseen:
            return _json(render.degraded_json(self.unseen), 200)
        return _json({"status": "ok"}, 200)


async def _serve(
    service: Service, sock: socket.socket, where: str, metrics_sock: Optional[socket.socket]
) -> None:
    runner = web.AppRunner(service.app(), handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    server = runner.server
    assert server is not None  # set up
    loop = asyncio.get_running_loop()
    options: dict[str, Any] = {
        "loop": loop,
        "access_log": None,
        "keepalive_timeout": service.idle_timeout,
        # A refused body (413, 408) is read and dropped for at most this long, then cut.
        "lingering_time": service.idle_timeout,
        # Bodies are taken as sent (a Content-Encoding is refused): aiohttp would
        # otherwise inflate them as they arrive, for any peer, before the peer check.
        "auto_decompress": False,
    }
    listening = await loop.create_server(
        lambda: _Protocol(service, server, UNIX, **options), sock=sock, backlog=1024
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    log.info(
        "kata-mem %s listening on %s (state dir %s, configuration %s, reconcile every %g s)",
        __version__,
        where,
        service.state_dir,
        service.default_config or "each request's, else where Kata looks",
        service.reconcile_interval,
    )
    scrapes: Optional[web.AppRunner] = None
    scraping: Optional[asyncio.AbstractServer] = None
    if metrics_sock is not None:
        scrapes = web.AppRunner(
            service.metrics_app(), handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT_S
        )
        await scrapes.setup()
        tcp_server = scrapes.server
        assert tcp_server is not None  # set up
        scraping = await loop.create_server(
            lambda: _Protocol(service, tcp_server, TCP, **options), sock=metrics_sock, backlog=128
        )
        host, port = metrics_sock.getsockname()[:2]
        log.info("metrics on %s (GET /metrics, /healthz)", MetricsAddress(host, port))
    loop_task = asyncio.create_task(service.reconcile_loop(stop))
    await stop.wait()
    log.info("stopping: no new connections; waiting for requests and visits in flight")
    if scraping is not None and scrapes is not None:
        scraping.close()
        await scrapes.cleanup()
    listening.close()
    # Waits for the handlers still running; the loop finishes the visits it started.
    await asyncio.gather(runner.cleanup(), loop_task)


def log_answer(request: SandboxRequest, done: Answer, peer: str, seconds: float) -> None:
    """The one INFO line of an answered request: its sandbox, event, mode, caller, what
    came of it and how long it took; in JSON mode the same as fields."""
    response = done.response
    if done.error is not None:
        outcome = f"error {done.error.kind}"
    elif isinstance(response, Applied):
        o = response.outcome
        outcome = o.status + (f" {o.reason}" if o.reason else "")
    elif isinstance(response, Planned):
        outcome = f"planned {to_mib_floor(response.plan.memory.target)} MiB"
    else:
        outcome = "forgotten"
    ms = round(seconds * 1000, 1)
    log.info(
        "sandbox %s: %s (%s) from %s: %s, exit %d, %g ms",
        request.sandbox,
        request.event,
        request.mode,
        peer,
        outcome,
        done.exit_code,
        ms,
        extra={
            "fields": {
                "sandbox": request.sandbox,
                "event": request.event,
                "mode": request.mode,
                "peer": peer,
                "outcome": outcome,
                "exit_code": done.exit_code,
                "duration_ms": ms,
            }
        },
    )


def _check_not_in_state_dir(path: str, state_dir: str) -> None:
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


def run_service(
    socket_path: Optional[str],
    group: Optional[str],
    state_dir: str,
    settings: Settings,
    idle_timeout: float = IDLE_TIMEOUT_S,
    reconcile_interval: float = RECONCILE_INTERVAL_S,
    metrics_address: Optional[MetricsAddress] = None,
    default_config: Optional[str] = None,
) -> int:
    """``kata-mem serve``: listen until SIGTERM, then finish what is in flight; 0.

    :raises ConfigError: the socket or the metrics address cannot be had (in use, not a
        socket, no such group), or the state directory is not kata-mem's.
    """
    from kata_mem.edges.statedir import state_dir_state

    gid = group_id(group)
    state_dir_state(state_dir)  # kata-mem's, empty or absent; checked before anything is made
    _raise_open_files()
    passed = activated(os.environ)
    # First: a port in use is refused before the unix socket is made.
    metrics_sock = None if metrics_address is None else bind_metrics(metrics_address)
    try:
        if passed is None:
            path = socket_path or DEFAULT_SOCKET
            _check_not_in_state_dir(path, state_dir)
            listener = bind(path, gid)
        else:
            listener = Listener(passed)
    except BaseException:
        if metrics_sock is not None:
            metrics_sock.close()
        raise
    where = "the socket systemd passed" if passed is not None else str(listener.path)
    service = Service(
        state_dir,
        settings,
        gid,
        os.environ,
        idle_timeout,
        reconcile_interval,
        None if default_config is None else os.path.abspath(default_config),
    )
    try:
        asyncio.run(_serve(service, listener.sock, where, metrics_sock))
    finally:
        if metrics_sock is not None:
            metrics_sock.close()
        # A handler cut off by the shutdown timeout leaves its thread running: the
        # journal it writes is finished before the process goes.
        service.pool.shutdown(wait=True)
        listener.close()
    log.info("stopped")
    return 0
