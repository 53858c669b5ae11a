"""Reading the files a user names: bounded, regular files only, never blocking.

Every file kata-mem reads (configuration and drop-ins, Pod manifests, OCI specs,
journals, saved requests, shim requests on disk) goes through :func:`read_capped`.
A FIFO, a device such as ``/dev/zero`` or ``/dev/urandom``, a socket or a
directory is refused before a byte is read, and nothing larger than the cap is
ever held in memory. The caps are documented in docs/ ("Input files and
their limits"); a real file of each kind is a hundredth of its cap or less.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Optional, Union

from kata_mem.core.errors import InputError, KataMemError
from kata_mem.core.units import MiB, to_kib_floor, to_mib_floor

#: Size caps, documented in docs/ ("Input files and their limits").
CONFIG_CAP = 1 * MiB  # a Kata configuration or drop-in; upstream ones are ~30 KiB
MANIFEST_CAP = 4 * MiB  # a Pod manifest or an OCI config.json
STATE_CAP = 1 * MiB  # a journal or saved request written by kata-mem (a few KiB)

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def read_capped(
    path: Union[str, Path],
    *,
    cap: int,
    what: str,
    error: type[KataMemError],
    check: Optional[Callable[[os.stat_result], None]] = None,
) -> bytes:
    """The bytes of the regular file ``path``, at most ``cap`` of them.

    The file is opened with ``O_NONBLOCK`` so that a FIFO without a writer cannot
    block the open; its type is checked on the open descriptor (no race with a
    rename) before anything is read, and so is ``check`` (given the descriptor's
    ``fstat``: who may have written it), when given.

    :raises error: (the caller's class, with ``what`` naming the file's role) when
        the file is missing, unreadable, not a regular file, or larger than ``cap``;
        whatever ``check`` raises.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise error(f"{path}: no such {what} file") from exc
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a unix socket (or a FIFO opened for writing)
            raise error(f"{path}: is a socket, expected {_a(what)} file") from exc
        raise error(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    try:
        try:
            info = os.fstat(fd)
        except OSError as exc:
            raise error(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
        if check is not None:
            check(info)
        return read_open(fd, info, path, cap=cap, what=what, error=error)
    finally:
        os.close(fd)


def read_open(
    fd: int,
    info: os.stat_result,
    path: Union[str, Path],
    *,
    cap: int,
    what: str,
    error: type[KataMemError],
) -> bytes:
    """:func:`read_capped` on a descriptor the caller opened (and checked, and closes),
    given its ``fstat`` (the caller's, which said who could have written it: one
    ``fstat`` a file); ``path`` names it in errors.

    :raises error: as :func:`read_capped`.
    """
    try:
        kind = stat.S_IFMT(info.st_mode)
        if kind != stat.S_IFREG:
            shown = _KINDS.get(kind, "not a regular file")
            raise error(f"{path}: is {shown}, expected a regular {what} file")
        if info.st_size > cap:
            raise error(
                f"{path}: {info.st_size} bytes, larger than the {_fmt_cap(cap)} {_a(what)} may have"
            )
        # Regular files may still grow while read (or lie in st_size, as in /proc):
        # read one byte past the cap and refuse what does not fit.
        chunks = []
        left = cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    except OSError as exc:
        raise error(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    if len(data) > cap:
        raise error(f"{path}: larger than the {_fmt_cap(cap)} {_a(what)} may have")
    return data


def read_input_text(path: Union[str, Path], what: str) -> str:
    """A file a caller names as input (a Pod manifest, an OCI spec): at most
    :data:`MANIFEST_CAP`, UTF-8, errors as :class:`~kata_mem.core.errors.InputError`.

    :raises InputError: as :func:`read_capped_text` says.
    """
    return read_capped_text(path, cap=MANIFEST_CAP, what=what, error=InputError)


def read_capped_text(
    path: Union[str, Path], *, cap: int, what: str, error: type[KataMemError]
) -> str:
    """:func:`read_capped`, decoded as UTF-8.

    :raises error: as :func:`read_capped`, or when the file is not UTF-8 text.
    """
    data = read_capped(path, cap=cap, what=what, error=error)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text (byte {exc.start}), expected {_a(what)} file") from exc


def not_regular(path: Union[str, Path]) -> str:
    """Why ``path`` cannot be read as a file ("does not exist", "is a FIFO", ...), or ""
    when it is a regular file. Only looks (``stat``): never opens, so never blocks."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    kind = stat.S_IFMT(info.st_mode)
    return "" if kind == stat.S_IFREG else "is " + _KINDS.get(kind, "not a regular file")


def _a(what: str) -> str:
    """``what`` with its article: "a Pod manifest", "an OCI spec" (said oh-see-eye)."""
    return f"an {what}" if what[:1] in "AEIOUaeiou" else f"a {what}"


def _fmt_cap(cap: int) -> str:
    return f"{to_mib_floor(cap)} MiB" if cap >= MiB else f"{to_kib_floor(cap)} KiB"


__all__ = [
    "CONFIG_CAP",
    "MANIFEST_CAP",
    "STATE_CAP",
    "not_regular",
    "read_capped",
    "read_capped_text",
    "read_input_text",
    "read_open",
]
