"""Find and read the host memory cgroup of the VMM (cgroup v2 and v1).

A process's memory cgroup is named in ``/proc/PID/cgroup`` (v1: ``N:memory:/path``,
v2: ``0::/path``) relative to a cgroup hierarchy; ``/proc/self/mountinfo`` says
where that hierarchy is mounted here. From that directory up to the root of the
mount every limit counts (the effective limit is the smallest). Files are read
with :func:`kata_mem.edges.files.read_capped_text` (bounded, ``O_NONBLOCK``; cgroupfs
and procfs files are regular files to it).

Inside a cgroup namespace (a pod's own, which containerd and CRI-O give every pod on
cgroup v2 nodes) both ``/proc/PID/cgroup`` and the root field of a cgroup mount in
``/proc/self/mountinfo`` are shown relative to the reader's namespace root, with ``/..``
for every level above it (cgroup_namespaces(7); Documentation/admin-guide/cgroup-v2.rst,
"Namespace"; kernel/cgroup/cgroup.c ``cgroup_show_path`` and ``proc_cgroup_show`` both
call ``kernfs_path_from_node`` against the current namespace's cgroup). So a QEMU in
``/kubepods/podQ/x`` read from a namespace rooted at ``/kubepods/podK/c`` is
``/../../podQ/x``, and the host's cgroup tree bind-mounted into the container (the
DaemonSet's hostPath volume) has the root ``/../../..``: the two resolve against each
other without knowing where the namespace is. The directory found is proven to be the
process's own by its ``cgroup.procs``, which lists the pid.

What cannot be found or read raises :class:`CgroupUnreadable`, which is deliberately not
a :class:`~kata_mem.core.errors.KataMemError`: the guard then cannot see (a
:class:`~kata_mem.core.model.Unseen`), which the planner holds growth for, never an exit
code.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Optional, Union

from kata_mem.core.errors import ConfigError, KataMemError
from kata_mem.core.model import CgroupLevel, HostCgroup, UnseenReason
from kata_mem.core.values import Frozen
from kata_mem.edges.files import read_capped_text
from kata_mem.edges.ownership import check_way, mode, who

#: Per version: (limit file, usage file).
FILES = {2: ("memory.max", "memory.current"), 1: ("memory.limit_in_bytes", "memory.usage_in_bytes")}

#: v1 reads back "no limit" as PAGE_COUNTER_MAX pages in bytes: LONG_MAX rounded down to
#: the page size (9223372036854771712 with 4 KiB pages, 9223372036854710272 with 64 KiB
#: pages on arm64/ppc64le), and what was written as a huge number may read back just
#: below it. No machine has 4 EiB, so anything from 2**62 up cannot bind: none.
V1_UNLIMITED = 2**62

_VALUE_CAP = 4096  # a limit or usage file: one number
_CGROUP_LIST_CAP = 64 * 1024  # /proc/PID/cgroup: one line per hierarchy
_MOUNTINFO_CAP = 8 * 1024 * 1024  # busy nodes have thousands of mounts, ~200 bytes each

_DIGITS = re.compile(r"[0-9]+")
_ESCAPE = re.compile(r"\\([0-7]{3})")


class CgroupUnreadable(Exception):
    """The cgroup could not be found or read; the message names the file and what
    was wrong, ``reason`` says which of those it was. Not part of the error tree:
    callers report it as a guard that cannot see."""

    def __init__(self, message: str, reason: UnseenReason = "unreadable") -> None:
        super().__init__(message)
        self.message = message
        self.reason: UnseenReason = reason

    def __str__(self) -> str:
        return self.message


def read_proc_cgroup(text: str) -> tuple[Optional[str], Optional[str]]:
    """Pure: from the text of ``/proc/PID/cgroup``, (v1 memory path, v2 path), e.g.
    ``("/kubepods/pod1", None)`` or ``(None, "/kubepods.slice/x")``.

    A v1 line is ``N:memory:/path`` (the controller list may be comma-separated,
    ``4:memory,foo:/p``); the v2 line is ``0::/path``. Both may be present (hybrid
    hosts): then the v1 memory path is the one that counts, as the v2 hierarchy
    cannot have the memory controller. Lines of any other shape are skipped.
    """
    v1: Optional[str] = None
    v2: Optional[str] = None
    for line in text.splitlines():
        # The path is last and may itself hold ':'.
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[2].startswith("/"):
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path if v2 is None else v2
        elif "memory" in controllers.split(","):
            v1 = path if v1 is None else v1
    return v1, v2


def parse_limit(raw: str, version: int) -> Optional[int]:
    """Pure: a limit file's text to bytes, ``None`` for no limit.

    v2 ``memory.max``: ``max`` or a number of bytes. v1 ``memory.limit_in_bytes``: a
    number of bytes, where :data:`V1_UNLIMITED` and above mean none.

    :raises ValueError: naming the text, for anything else.
    """
    text = raw.strip()
    if version == 2:
        if text == "max":
            return None
        if _DIGITS.fullmatch(text):
            return int(text)
        raise ValueError(f"{raw[:40]!r}: expected 'max' or a number of bytes")
    if version == 1:
        if _DIGITS.fullmatch(text):
            value = int(text)
            return None if value >= V1_UNLIMITED else value
        raise ValueError(f"{raw[:40]!r}: expected a number of bytes")
    raise ValueError(f"cgroup version {version}: expected 1 or 2")


def cgroup_of_dir(directory: str, origin: str) -> HostCgroup:
    """The memory cgroup in ``directory`` (``--host-cgroup PATH``, ``host.cgroup``).

    The version comes from its files (``memory.max``: v2, ``memory.limit_in_bytes``:
    v1). Every directory from it up to the root of the cgroup mount (where the parent
    no longer has the limit file) that has a limit gives a :class:`CgroupLevel`,
    innermost first, with its usage (``None`` when unreadable).

    As root, the directory, every directory above it and the limit and usage files read
    must be root's and not writable by group or others, as for every file kata-mem reads
    as root (:mod:`kata_mem.edges.ownership`): the path is saved and read again by
    ``reconcile`` and the service, and whoever could write those files would choose the
    limit root sizes VMs against.

    :raises CgroupUnreadable: when the directory does not exist, has no memory limit
        file, a limit file on the way up cannot be read or parsed (a guard must not
        silently skip a limit), or, as root, another user could have written it.
    """
    start = os.path.abspath(directory)
    prefix = f"{origin} {directory!r}"
    if not os.path.isdir(start):
        what = "is not a directory" if os.path.exists(start) else "does not exist"
        raise CgroupUnreadable(f"{prefix}: {what}; expected a memory cgroup directory{_EXAMPLE}")
    as_root = os.geteuid() == 0
    if as_root:
        try:
            check_way(Path(start), prefix, "the host cgroup", itself=True)
        except ConfigError as exc:
            raise CgroupUnreadable(exc.message) from exc
    version = _version(start)
    if version is None:
        raise CgroupUnreadable(
            f"{prefix}: has neither memory.max (cgroup v2) nor memory.limit_in_bytes "
            f"(cgroup v1); expected a memory cgroup directory{_EXAMPLE}"
        )
    return _walk(start, version, prefix, origin, trusted_files=as_root)


def cgroup_of_pid(pid: int, *, proc: str = "/proc", mountinfo: Optional[str] = None) -> HostCgroup:
    """The memory cgroup of process ``pid``, read as :func:`cgroup_of_dir`.

    The process's path comes from ``{proc}/PID/cgroup``; the directory from the
    mount of that hierarchy in ``mountinfo`` (the text of a mountinfo file;
    ``None`` reads ``{proc}/self/mountinfo``): a v1 ``cgroup`` mount with the
    ``memory`` option, else a ``cgroup2`` mount whose ``cgroup.controllers`` has
    ``memory``. A mount of a subtree (its root field is not ``/``, as inside
    containers) serves the processes below that root; limits above it are not
    visible. A process in the v2 root cgroup has no limit (no levels).

    :raises CgroupUnreadable: the process is gone, has no memory cgroup, or its
        cgroup is not mounted here or cannot be read.
    """
    prefix = f"pid {pid}"
    cgroup_file = f"{proc}/{pid}/cgroup"
    try:
        text = _read(cgroup_file, _CGROUP_LIST_CAP, "process cgroup list")
    except CgroupUnreadable as exc:
        if not os.path.lexists(cgroup_file):
            raise CgroupUnreadable(
                f"{prefix}: no such process ({cgroup_file} does not exist)"
            ) from exc
        raise CgroupUnreadable(f"{prefix}: {exc.message}") from exc
    v1_path, v2_path = read_proc_cgroup(text)
    if v1_path is None and v2_path is None:
        raise CgroupUnreadable(
            f"{prefix}: {cgroup_file} has no memory line ('N:memory:/path' for cgroup v1 or "
            "'0::/path' for cgroup v2)"
        )
    if mountinfo is None and proc == "/proc":
        usual = _usual_directory(pid, v1_path, v2_path)
        if usual is not None:
            version = 1 if v1_path is not None else 2
            return _walk(usual, version, f"{prefix} (memory cgroup {usual})", prefix)
    if mountinfo is None:
        try:
            mountinfo = _read(f"{proc}/self/mountinfo", _MOUNTINFO_CAP, "mountinfo")
        except CgroupUnreadable as exc:
            raise CgroupUnreadable(f"{prefix}: {exc.message}") from exc
    mounts = parse_mountinfo(mountinfo)
    if v1_path is not None:
        version, path = 1, v1_path
        candidates = [m for m in mounts if m.fstype == "cgroup" and "memory" in m.options]
        if not candidates:
            raise CgroupUnreadable(
                f"{prefix}: in memory cgroup {v1_path} (cgroup v1) but no cgroup v1 hierarchy "
                "with the memory controller is mounted (mountinfo)",
                "not_reachable",
            )
    else:
        assert v2_path is not None
        version, path = 2, v2_path
        candidates = [m for m in mounts if m.fstype == "cgroup2" and _has_memory(m.point)]
        if not candidates:
            raise CgroupUnreadable(
                f"{prefix}: in cgroup {v2_path} (cgroup v2) but no cgroup2 mount has the "
                "memory controller (cgroup.controllers), and no cgroup v1 memory line",
                "not_reachable",
            )
    found = _directory(path, candidates, pid)
    if isinstance(found, str):
        raise CgroupUnreadable(f"{prefix}: {found}", "unreadable")
    if found is None:
        roots = ", ".join(sorted({m.root for m in candidates}))
        outside = _parts(path)[:1] == [".."]
        where = (
            "outside this process's cgroup namespace, and no cgroup filesystem mounted here "
            "reaches it (a pod's own cgroup namespace: mount the host's /sys/fs/cgroup, as the "
            "DaemonSet's cgroup volume does)"
            if outside
            else "outside the mounted part of its hierarchy"
        )
        raise CgroupUnreadable(
            f"{prefix}: memory cgroup {path} (cgroup v{version}) is {where} (mount root {roots})",
            "not_reachable",
        )
    directory, mount = found
    if (
        version == 2
        and directory == mount.point
        and not os.path.lexists(os.path.join(directory, FILES[2][0]))
    ):
        # The v2 root cgroup has no memory.max: nothing limits it.
        return HostCgroup(
            path=directory,
            version=2,
            usage=_usage(os.path.join(directory, FILES[2][1]))[0],
            origin=prefix,
        )
    if not os.path.isdir(directory):
        raise CgroupUnreadable(
            f"{prefix}: memory cgroup directory {directory} does not exist (process gone?)"
        )
    if _version(directory) != version:
        raise CgroupUnreadable(
            f"{prefix}: {directory} has no {FILES[version][0]}; expected the memory cgroup "
            f"(v{version}) of the process"
        )
    return _walk(directory, version, f"{prefix} (memory cgroup {directory})", prefix)


#: Where the memory hierarchy is mounted on nearly every host (systemd's layout).
USUAL_MOUNT = {1: "/sys/fs/cgroup/memory", 2: "/sys/fs/cgroup"}


def _usual_directory(pid: int, v1_path: Optional[str], v2_path: Optional[str]) -> Optional[str]:
    """The process's memory cgroup directory under :data:`USUAL_MOUNT`, when that
    directory has the limit file and its ``cgroup.procs`` lists ``pid`` (which proves
    it is the process's cgroup in its memory hierarchy); else ``None`` and the caller
    reads mountinfo. Why: the kernel takes ~12 ms to write the mountinfo of a node with
    5000 mounts, 6% of an ``apply``; these reads take well under a millisecond."""
    version, path = (1, v1_path) if v1_path is not None else (2, v2_path)
    if path is None or ".." in path.split("/"):
        return None
    directory = os.path.join(USUAL_MOUNT[version], path.strip("/")).rstrip("/")
    if version == 2 and directory == USUAL_MOUNT[2]:
        return None  # the v2 root: its own case below
    if _version(directory) != version:
        return None
    try:
        procs = _read(os.path.join(directory, "cgroup.procs"), _CGROUP_LIST_CAP, "cgroup.procs")
    except CgroupUnreadable:
        return None
    return directory if str(pid) in procs.split() else None


class Mount(Frozen):
    """A cgroup mount from mountinfo: its root in the hierarchy, where it is mounted,
    the filesystem type and the super options (v1: the controllers)."""

    root: str
    point: str
    fstype: str
    options: tuple[str, ...]


def parse_mountinfo(text: str) -> tuple[Mount, ...]:
    """Pure: the ``cgroup`` and ``cgroup2`` mounts of a mountinfo text (proc(5)):
    ``ID PARENT MAJ:MIN ROOT POINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS``,
    with ``\\040``-style escapes in ROOT and POINT. Malformed lines are skipped."""
    mounts = []
    for line in _cgroup_lines(text):
        fields = line.split()
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        tail = fields[dash + 1 :]
        if len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append(
            Mount(
                root=_unescape(fields[3]),
                point=_unescape(fields[4]),
                fstype=tail[0],
                options=tuple(tail[2].split(",")),
            )
        )
    return tuple(mounts)


def _cgroup_lines(text: str) -> Iterator[str]:
    """The lines of a mountinfo text that may be cgroup mounts: those holding
    `` - cgroup`` (the separator and the filesystem type; the kernel escapes spaces in
    ROOT and POINT, so `` - `` is nothing else). Busy nodes have thousands of container
    mounts and a handful of cgroup ones: found with ``str.find``, the rest is never split
    (5000 mounts: 0.8 ms instead of 16 ms, on a 2-core test machine)."""
    pos = text.find(" - cgroup")
    while pos != -1:
        start = text.rfind("\n", 0, pos) + 1
        end = text.find("\n", pos)
        end = len(text) if end == -1 else end
        yield from (line for line in text[start:end].splitlines() if " - cgroup" in line)
        pos = text.find(" - cgroup", end)


_EXAMPLE = (
    " (v2, e.g. /sys/fs/cgroup/kubepods.slice/...; v1, e.g. /sys/fs/cgroup/memory/kubepods/...)"
)


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def _parts(path: str) -> list[str]:
    """A cgroup path as the kernel writes it (``/``, ``/a/b``, ``/../../a``), in parts."""
    return [part for part in path.split("/") if part]


def _climbs(parts: list[str]) -> int:
    """How many levels a namespace-relative cgroup path climbs above the namespace."""
    return next((i for i, part in enumerate(parts) if part != ".."), len(parts))


#: The most directories :func:`_directory` looks at to place a path that leaves the
#: namespace by a nearer ancestor than the mount's root (a node has a few thousand).
_SEARCH_CAP = 100_000


def _directory(path: str, mounts: list[Mount], pid: int) -> Union[tuple[str, Mount], str, None]:
    """Where the hierarchy's ``path`` is here, and through which mount; ``None`` when no
    mount reaches it, or why the one that does is not the process's cgroup.

    ``path`` and each mount's root are both relative to this process's cgroup namespace
    (see the module's docstring): each climbs to the nearest common ancestor with the
    namespace's root, then names its way down. A mount whose root climbs ``m`` levels
    holds a path that climbs ``k <= m``: at ``k == m`` the path's names lead down from
    the mount's root; at ``k < m`` the path leaves from an ancestor ``m - k`` levels below
    the mount's root on the way to the namespace, whose names no file here gives, so the
    directories that deep are tried for the path's names. Mounts stack (a container
    runtime's own cgroup mount, the host's tree bind-mounted over it at the same place),
    so the later ones are tried first. A directory is taken only when its ``cgroup.procs``
    lists ``pid`` (a process is in one cgroup of a hierarchy): a shadowed mount's path
    names a directory of the mount on top, another cgroup.
    """
    parts = _parts(path)
    k = _climbs(parts)
    names = parts[k:]
    refused = ""
    for mount in reversed(mounts):
        root = _parts(mount.root)
        m = _climbs(root)
        if k > m or (k < m and len(root) > m):
            continue  # above the mount's root, or beside a subtree mounted elsewhere
        if k == m:
            if parts[: len(root)] != root:
                continue
            directory = os.path.join(mount.point, *parts[len(root) :])
            if len(mounts) == 1 and k == 0:
                return directory, mount  # the usual case: nothing stacked, nothing outside
            candidates: Iterator[str] = iter((directory,))
        else:
            candidates = (
                os.path.join(top, *names) for top in _below(mount.point, m - k, _SEARCH_CAP)
            )
        for directory in candidates:
            if not os.path.isdir(directory):
                continue
            procs = os.path.join(directory, "cgroup.procs")
            try:
                listed = _read(procs, _CGROUP_LIST_CAP, "cgroup.procs").split()
            except CgroupUnreadable as exc:
                refused = refused or exc.message
                continue
            if str(pid) in listed:
                return directory, mount
            if k == m:
                refused = refused or f"{procs} does not list the process (a mount over another?)"
    return refused or None


def _below(top: str, depth: int, cap: int) -> Iterator[str]:
    """The directories exactly ``depth`` levels below ``top`` (not through symlinks), at
    most ``cap`` looked at."""
    level = [top]
    for _ in range(depth):
        deeper = []
        for directory in level:
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if entry.is_dir(follow_symlinks=False):
                            deeper.append(entry.path)
                            if len(deeper) >= cap:
                                break
            except OSError:
                continue
        level = sorted(deeper)
    yield from level


def _has_memory(point: str) -> bool:
    try:
        text = _read(os.path.join(point, "cgroup.controllers"), _VALUE_CAP, "cgroup.controllers")
    except CgroupUnreadable:
        return False
    return "memory" in text.split()


def _version(directory: str) -> Optional[int]:
    # lexists, not isfile: a limit "file" that is something else must fail loudly
    # when read, not make the directory look like no cgroup at all.
    for version in (2, 1):
        if os.path.lexists(os.path.join(directory, FILES[version][0])):
            return version
    return None


def _walk(
    start: str, version: int, prefix: str, origin: str, *, trusted_files: bool = False
) -> HostCgroup:
    """The cgroup at ``start`` and its limits up to the mount's root; ``trusted_files``:
    refuse a limit or usage file another user could have written."""
    limit_name, usage_name = FILES[version]
    if trusted_files:
        _check_written_by_root(os.path.join(start, usage_name), prefix)
    usage, problem = _usage(os.path.join(start, usage_name))
    unread = [problem] if problem else []
    levels = []
    directory = start
    while True:
        limit_file = os.path.join(directory, limit_name)
        if trusted_files:
            _check_written_by_root(limit_file, prefix)
            if directory != start:
                _check_written_by_root(os.path.join(directory, usage_name), prefix)
        try:
            raw = _read(limit_file, _VALUE_CAP, f"cgroup {limit_name}")
            limit = parse_limit(raw, version)
        except CgroupUnreadable as exc:
            raise CgroupUnreadable(
                f"{prefix}: {exc.message} (a limit on the way to the root cannot be skipped)"
            ) from exc
        except ValueError as exc:
            raise CgroupUnreadable(f"{prefix}: {limit_file} holds {exc}") from exc
        if limit is not None:
            level_usage = usage
            if directory != start:
                level_usage, problem = _usage(os.path.join(directory, usage_name))
                unread += [problem] if problem else []
            levels.append(CgroupLevel(path=directory, limit=limit, usage=level_usage))
        parent = os.path.dirname(directory)
        if parent == directory or not os.path.lexists(os.path.join(parent, limit_name)):
            break
        directory = parent
    return HostCgroup(
        path=start,
        version=version,
        usage=usage,
        levels=tuple(levels),
        origin=origin,
        unread_usage=tuple(unread),
    )


def _check_written_by_root(path: str, prefix: str) -> None:
    """Refuse a cgroup file another user could have written (its owner or its mode)."""
    try:
        info = os.lstat(path)
    except OSError:
        return  # not there: reading it says so
    if info.st_uid not in (0, os.geteuid()) or (
        not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022
    ):
        raise CgroupUnreadable(
            f"{prefix}: {path} is owned by {who(info.st_uid)}, mode {mode(info)}; another user "
            "could have written it, so kata-mem does not size against it. A host cgroup's "
            "files must be root's and not writable by group or others"
        )


def _usage(path: str) -> tuple[Optional[int], str]:
    """A usage file's bytes, or ``None`` and why not: unknown, which the guard can do
    without (it then counts the VMM overhead model alone), but says so."""
    try:
        text = _read(path, _VALUE_CAP, "cgroup usage").strip()
    except CgroupUnreadable as exc:
        return None, exc.message
    if _DIGITS.fullmatch(text):
        return int(text), ""
    return None, f"{path} holds {text[:40]!r}, not a number of bytes"


def _read(path: str, cap: int, what: str) -> str:
    try:
        return read_capped_text(path, cap=cap, what=what, error=KataMemError)
    except KataMemError as exc:
        raise CgroupUnreadable(exc.message) from exc


__all__ = [
    "V1_UNLIMITED",
    "CgroupUnreadable",
    "Mount",
    "cgroup_of_dir",
    "cgroup_of_pid",
    "parse_limit",
    "parse_mountinfo",
    "read_proc_cgroup",
]
