"""Who could have written a file: the trust rule of a root node agent, for every file
kata-mem reads as root from disk (its state, its configuration).

kata-mem uses such a file only when no other user could have written it, as sshd's
``StrictModes`` and sudo treat theirs: the file is the calling uid's and neither group
nor others may write it (checked on the opened descriptor, not by path), and every
directory above it, and every symlink on the way to it, belongs to root or the caller
and is not writable by others unless sticky (as ``/tmp``: there others cannot rename or
remove what is not theirs), so that no one else can swap it between a check and a use.
"""

from __future__ import annotations

import os
import pwd
import stat
from pathlib import Path

from kata_mem.core.errors import ConfigError


def who(uid: int) -> str:
    """A user as messages name it: ``nobody (uid 65534)``."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def others_could_write(info: os.stat_result) -> bool:
    """Whether a user other than the caller could have written it: another owner, or
    write permission for group or others (a symlink's own mode means nothing)."""
    return info.st_uid != os.geteuid() or (
        not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022 != 0
    )


def mode(info: os.stat_result) -> str:
    return f"{stat.S_IMODE(info.st_mode):04o}"


def check_way(target: Path, subject: str, thing: str, *, itself: bool = False) -> None:
    """Refuse ``target`` when another user could swap it for another between a check and
    a use: every directory above it must be owned by root or the caller and not writable
    by group or others, unless sticky; every symlink on the way must be root's or the
    caller's. ``target`` itself is the caller's to check with the stricter rule, or, with
    ``itself``, a directory checked with this one (a directory whose entries are read).
    A component that does not exist ends the walk: what follows is made, or not found.

    ``subject`` starts the message (``state_dir /run/kata-mem``), ``thing`` names what
    could be replaced (``the state directory``).

    :raises ConfigError: naming the directory or symlink, its owner and its mode.
    """
    trusted = (0, os.geteuid())
    owners = "root" if os.geteuid() == 0 else f"root or {who(os.geteuid())}"
    start = str(target) if target.is_absolute() else os.path.join(os.getcwd(), target)
    todo = [n for n in reversed(start.split("/")) if n not in ("", ".")]
    here, hops = "/", 0
    info = os.lstat(here)
    while True:
        if info.st_uid not in trusted or (info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX):
            raise ConfigError(
                f"{subject}: {here} is owned by {who(info.st_uid)}, mode {mode(info)}; another "
                f"user could replace {thing} through it, so nothing was read or changed. Every "
                f"directory above {thing} must be owned by {owners} and not writable by group or "
                "others (unless sticky, as /tmp is)"
            )
        while True:
            if not todo:
                return
            name = todo.pop()
            if name == "..":
                here = os.path.dirname(here)  # ``here`` has no symlinks: this is the real parent
                continue
            step = os.path.join(here, name)
            try:
                info = os.lstat(step)
            except OSError:
                return  # not there (yet), or not reachable: the open that follows says which
            if not stat.S_ISLNK(info.st_mode):
                break
            if info.st_uid not in trusted:
                raise ConfigError(
                    f"{subject}: {step} is a symlink owned by {who(info.st_uid)}; another user "
                    "could point it elsewhere, so nothing was read or changed. Symlinks on the "
                    f"way to {thing} must be owned by {owners}"
                )
            hops += 1
            try:
                link = os.readlink(step)
            except OSError:
                return
            if hops > 40:
                return  # a loop: the open that follows says so
            if link.startswith("/"):
                here = "/"
            todo += [n for n in reversed(link.split("/")) if n not in ("", ".")]
        if not stat.S_ISDIR(info.st_mode) or (not todo and not itself):
            return  # the target itself, or not a directory: the caller says
        here = step
