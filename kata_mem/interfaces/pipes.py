"""A closed stdout: how every command tells it from a bug, and exits quietly (the
reader of its result is gone, as in ``kata-mem shim < req.json | true``)."""

from __future__ import annotations

import os
import sys

#: The exit code when stdout is closed before the result is written (``kata-mem shim <
#: req.json | true``): what a shell reports for a command that SIGPIPE ends, such as ``yes``
#: in ``yes | head -1`` (128 + 13). kata-mem ignores SIGPIPE, as Python does, so that a
#: closed pipe never kills it mid-step; it exits quietly with this code instead (the recipe
#: of https://docs.python.org/3/library/signal.html#note-on-sigpipe).
CLOSED_STDOUT = 141


def stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone: poll reports POLLERR
    (a pipe without readers) or POLLHUP (a socket shut down) for it. Tells a closed
    stdout from a broken pipe elsewhere (a socket), which is a bug to report."""
    import select

    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a stream without a file
        return False
    poller = select.poll()
    poller.register(fd, 0)  # POLLERR and POLLHUP are reported whatever is asked for
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def closed_stdout() -> int:
    """Exit quietly on a closed stdout: point it at /dev/null, so that the interpreter's
    last flush of what is still buffered finds nothing to fail on; return
    :data:`CLOSED_STDOUT`."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return CLOSED_STDOUT
