"""stdin, stdout and stderr as the ``kata-mem`` process has them, whatever it was given.

stdout carries the result: when it cannot take it, the process says how, never with a
traceback, never as a bug. The reader is gone (a pipe or socket whose reader closed,
``kata-mem shim < req.json | true``, or no stdout at all, ``>&-``): exit
:data:`CLOSED_STDOUT`, quietly. It cannot take the bytes (a full disk, ``>/dev/full``, an
I/O error): one line on stderr, exit :data:`STDOUT_FAILED`.

stderr carries diagnostics only, so a stderr that cannot take a line (closed, a pipe
whose reader has gone, a full disk) loses the line, and nothing else: the result still
goes to stdout and the exit code is still the result's (a shim whose log pipe has gone
still gets its response document).

:func:`own_stdio`, at the process entry, arranges both, and gives a closed descriptor 0,
1 or 2 ``/dev/null``, so that no file kata-mem opens later takes its number (and receives
what a library writes to "stderr": glibc does the same for set-user-ID programs,
``__libc_check_standard_fds``).
"""

from __future__ import annotations

import errno
import io
import os
import sys
from typing import TYPE_CHECKING, Optional, TextIO

if TYPE_CHECKING:
    from typing_extensions import Buffer

from kata_mem.edges import logs

#: The exit code when stdout is closed before the result is written (``kata-mem shim <
#: req.json | true``, or ``>&-``): what a shell reports for a command that SIGPIPE ends,
#: such as ``yes`` in ``yes | head -1`` (128 + 13). kata-mem ignores SIGPIPE, as Python
#: does, so that a closed pipe never kills it mid-step; it exits quietly with this code
#: instead (the recipe of https://docs.python.org/3/library/signal.html#note-on-sigpipe).
CLOSED_STDOUT = 141
#: The exit code when stdout cannot take the result (a full disk, an I/O error):
#: ``EX_IOERR`` of sysexits.h, "an error occurred while doing I/O on some file".
STDOUT_FAILED = 74
#: What writing to a stdout whose reader has gone fails with. Not EBADF: a stdout that
#: is not there is known from the start (``absent``), and EBADF on one that is there is a
#: descriptor open for reading only (``1<&0``), which cannot take the result: 74.
_READER_GONE = (errno.EPIPE, errno.ECONNRESET)


class ResultLost(Exception):
    """Writing the result on stdout failed with ``cause``. Not an ``OSError``: nothing on
    the way (click answers every ``EPIPE`` with a quiet exit 1) takes it for another."""

    def __init__(self, cause: OSError, absent: bool = False) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.absent = absent

    @property
    def closed(self) -> bool:
        """Nobody reads stdout (as opposed to: it cannot take the bytes)."""
        return self.absent or self.cause.errno in _READER_GONE


class _Output(io.RawIOBase):
    """A write-only descriptor, stdout or stderr (``result``: stdout). A write that fails
    raises :class:`ResultLost` for stdout and loses the line for stderr; every later
    write is dropped, so that the interpreter's last flush finds nothing to fail on."""

    def __init__(self, fd: int, *, absent: bool, result: bool) -> None:
        super().__init__()
        self._fd = fd
        self._absent = absent  # closed when the process started: nothing to write to
        self._result = result
        self._dropping = False
        #: Set once a write is about to start: what SIGINT asks (see ``stops``) to know
        #: whether the result is on its way.
        self.used = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return not self._absent and os.isatty(self._fd)

    def write(self, data: Buffer) -> int:
        size = len(memoryview(data))
        if self._dropping:
            return size
        try:
            if self._absent:
                raise OSError(errno.EBADF, "closed when kata-mem started")
            self.used = True
            return os.write(self._fd, data)
        except OSError as exc:
            self._dropping = True
            if self._result:
                raise ResultLost(exc, self._absent) from exc
            return size


def _reopen(fd: int) -> bool:
    """Give ``fd`` ``/dev/null`` when it is closed; whether it was."""
    try:
        os.fstat(fd)
        return False
    except OSError:
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        return True


def _text(raw: _Output, like: Optional[TextIO], errors: str) -> io.TextIOWrapper:
    """A text stream on ``raw`` with the encoding and error handler of ``like`` (the
    stream Python set up, if any: its locale's choice)."""
    return io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=like.encoding if like is not None else "utf-8",
        errors=like.errors if like is not None and like.errors else errors,
        line_buffering=like is not None and bool(like.line_buffering),
    )


def own_stdio() -> None:
    """Arrange stdin, stdout and stderr as the module says. For the process entry only:
    it replaces ``sys.stdin``, ``sys.stdout`` and ``sys.stderr``."""
    closed = [_reopen(fd) for fd in (0, 1, 2)]
    if sys.stdin is None:
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's, never closed
    sys.stdout = _text(_Output(1, absent=closed[1], result=True), sys.stdout, "strict")
    stderr = _text(_Output(2, absent=closed[2], result=False), sys.stderr, "backslashreplace")
    stderr.reconfigure(line_buffering=True, write_through=True)  # as Python's own stderr
    sys.stderr = stderr


def stdout_used() -> bool:
    """Whether a write to stdout has started (a result is on its way, whole or not). Not
    before :func:`own_stdio`: kata-mem writes nothing there before it (``kata-mem-shim``,
    which writes the service's answer itself, says so to :mod:`~kata_mem.interfaces.stops`)."""
    raw = getattr(getattr(sys.stdout, "buffer", None), "raw", None)
    return isinstance(raw, _Output) and raw.used


def write_now(fd: int, text: str) -> None:
    """Write ``text`` on ``fd`` past Python's buffers, for a process about to end: what
    cannot be written is lost, as :class:`_Output` loses a diagnostic."""
    data = text.encode("utf-8", "backslashreplace")
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass


def lost(exc: ResultLost) -> int:
    """The exit code for a result stdout did not take, with the one line that says why
    when stdout cannot take bytes (none when its reader is gone: nobody is left to tell)."""
    if exc.closed:
        return CLOSED_STDOUT
    logs.emit(
        "error",
        f"stdout: the result could not be written ({exc.cause.strerror or exc.cause}): what "
        "the command did stands, only its report is lost",
        kind="output",
        exit_code=STDOUT_FAILED,
    )
    return STDOUT_FAILED


def flush() -> Optional[int]:
    """Flush what stdout still holds; the exit code when it could not take it."""
    try:
        sys.stdout.flush()
    except ResultLost as exc:
        return lost(exc)
    return None
