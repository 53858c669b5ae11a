"""``kata-mem-shim``: ``kata-mem shim`` handed to the node service when it runs.

A runtime shim execs this on every container event. It reads the request on stdin and,
when ``kata-mem serve`` listens on its socket (``$KATA_MEM_SOCKET``, else
``/run/kata-mem/kata-mem.sock``, serve's default), sends it there as ``POST /v1/shim`` and
writes the answer: the same document, byte for byte, the same exit code and the same
line on stderr as ``kata-mem shim`` in this process would (the service renders one line
of JSON the way the shim does and sends the exit code in ``X-Kata-Mem-Exit-Code``). The
service has the configuration, the host probe and the Python modules loaded already, so
the call costs little more than starting Python: this module imports only ``os``, ``sys``,
``time`` and the C socket module, never the rest of kata-mem, unless it answers itself.

Every wait on the service (connect, send, answer) is bounded by one deadline,
``$KATA_MEM_SHIM_TIMEOUT`` seconds (:data:`DEFAULT_TIMEOUT_S`) from when the request was
read. When it passes, the shim answers with its error document (exit 6), saying whether
the service had the whole request (it may still carry it out) or not (nothing was done);
it does not answer in this process then, which would have no deadline left and could wait
for a sandbox lock the stalled service holds.

It answers in this process, exactly as ``kata-mem shim`` does but in the state directory
and with the configuration the service keeps (:func:`kata_mem.interfaces.shim.answer_for_service`),
when nothing listens there (no socket, connection refused), when the socket's listener is
neither root nor this user (``SO_PEERCRED``: kata-mem runs as root and never takes a
planted socket's word, as its QMP backend does not), when the service refuses this caller
(not root nor of its ``--group``), when the request is larger than the service takes,
when the answer is not a whole shim document or is larger than :data:`MAX_ANSWER_BYTES`,
or when it is given arguments (``--help``, ``--print-schema``, the global options). A
request the service may have begun is safe to answer again: every call takes the
sandbox's lock and first reconciles its journal with the hypervisor, in the one state of
its VM (docs/design/state.md).
"""

from __future__ import annotations

# The socket module's own import (selectors, its enums) costs as much again as what it
# wraps: the C module is all a unix stream socket needs.
import _socket
import os
import sys
import time

# Not typing's, as kata_mem/__init__.py: importing typing costs a tenth of this path.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NoReturn, Optional

    from kata_mem.core.errors import KataMemError

#: Where ``kata-mem serve`` listens by default (``serve --socket``).
DEFAULT_SOCKET = "/run/kata-mem/kata-mem.sock"
SOCKET_ENV = "KATA_MEM_SOCKET"
#: The shim's deadline on the service, in seconds: connecting, sending and the answer,
#: together. Below the kubelet's 2-minute ``--runtime-request-timeout``, so that the CRI
#: call a runtime answers with the shim's help hears the shim's answer, not its own
#: timeout; above a resize of several steps of ``step_timeout_s`` (20 s).
TIMEOUT_ENV = "KATA_MEM_SHIM_TIMEOUT"
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 86400.0
#: The largest request the service and the shim take (``core.request.MAX_REQUEST_BYTES``;
#: a test keeps the two equal: importing it here would cost what this module saves).
MAX_REQUEST_BYTES = 1 << 20
#: The largest answer the shim reads, its HTTP head included: an answer names a field of
#: its request (at most 1 MiB) a few times at most, and a listener that sends more is not
#: answering as kata-mem serve does (issue 33, item 10: one fed the shim 9 GB).
MAX_ANSWER_BYTES = 8 * MAX_REQUEST_BYTES
#: What starts every shim response document (``protocol.Answer.document``), so that an
#: answer of another kind (an HTTP error of the service) is never passed on as one.
_SHIM_DOCUMENT = b'{"schema": "kata-mem/shim-response/v1"'
#: ... and every error document (``render.error_json``): its message is the shim's stderr line.
_ERROR_DOCUMENT = _SHIM_DOCUMENT + b', "error": '
_EXIT_HEADER = b"x-kata-mem-exit-code"


class Late(Exception):
    """The deadline passed before the service answered; ``sent``: it had the whole request."""

    def __init__(self, sent: bool) -> None:
        super().__init__("sent" if sent else "not sent")
        self.sent = sent


def ask_service(path: str, request: bytes, deadline: float) -> tuple[bytes, int] | None:
    """The service's answer to ``request`` at socket ``path``: the document and the exit
    code; ``None`` when it cannot or must not answer (see the module's docstring).

    :raises Late: ``deadline`` (``time.monotonic()``) passed first.
    """
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sent = False
    chunks = []
    try:
        try:
            _connect(sock, path, deadline - time.monotonic())
        except BlockingIOError as exc:
            raise Late(sent) from exc  # its backlog stayed full: it takes no one
        except OSError:
            return None  # absent, refused, not a socket: answered here
        if not _trusted(sock):
            return None
        head = (
            b"POST /v1/shim HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(request)).encode() + b"\r\n\r\n"
        )
        sock.settimeout(_left(deadline, sent))
        sock.sendall(head + request)
        sent = True
        size = 0
        while True:
            sock.settimeout(_left(deadline, sent))
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                return None
            chunks.append(chunk)
    except _socket.timeout as exc:  # an OSError too: caught first
        raise Late(sent) from exc
    except OSError:
        return None
    finally:
        sock.close()
    return _shim_answer(b"".join(chunks))


def _left(deadline: float, sent: bool) -> float:
    """What is left of the deadline, for a wait.

    :raises Late: nothing (a timeout of 0 would not wait at all: a non-blocking socket).
    """
    left = deadline - time.monotonic()
    if left <= 0:
        raise Late(sent)
    return left


def _connect(sock: _socket.socket, path: str, seconds: float) -> None:
    """``connect(2)`` to ``path`` that waits at most ``seconds`` for room in the listener's
    backlog. A non-blocking unix socket's connect fails with EAGAIN at once when the backlog
    is full (connect(2); so does one with a Python timeout, python/cpython#117208); then a
    blocking one, bounded by ``SO_SNDTIMEO``, which a unix socket's connect waits by
    (net/unix/af_unix.c ``unix_stream_connect``), waits for room.

    :raises BlockingIOError: the backlog stayed full for ``seconds``.
    """
    if seconds <= 0:
        raise BlockingIOError
    sock.setblocking(False)
    try:
        sock.connect(path)
        return
    except BlockingIOError:
        pass  # the backlog is full: wait for room
    finally:
        sock.setblocking(True)
    import _struct  # only now: its import costs a tenth of the usual path's

    whole = int(seconds)
    micro = max(int((seconds - whole) * 1_000_000), 0 if whole else 1)  # 0, 0 waits forever
    sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDTIMEO, _struct.pack("ll", whole, micro))
    sock.connect(path)


def _trusted(sock: _socket.socket) -> bool:
    """Whether the listener is root or this user (``SO_PEERCRED``'s ``struct ucred``: a
    pid, then the uid and gid)."""
    raw = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    uid = int.from_bytes(raw[4:8], sys.byteorder)
    return uid in (0, os.geteuid())


def _shim_answer(response: bytes) -> tuple[bytes, int] | None:
    """The document and exit code of a whole HTTP response that carries a shim document."""
    head, sep, body = response.partition(b"\r\n\r\n")
    if not sep:
        return None
    lines = head.split(b"\r\n")
    code = None
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == _EXIT_HEADER:
            code = value.strip()
        elif name == b"content-length":
            length = value.strip()
    if (
        code is None
        or not code.isdigit()
        or length is None
        or not length.isdigit()
        or int(length) != len(body)
        or not body.startswith(_SHIM_DOCUMENT)
        or not body.endswith(b"\n")
    ):
        return None
    return body, int(code)


def timeout_s(text: Optional[str]) -> float:
    """The deadline ``$KATA_MEM_SHIM_TIMEOUT`` gives, in seconds (unset or empty: the default).

    :raises ValueError: not a number above 0 and at most :data:`MAX_TIMEOUT_S`.
    """
    if not text:
        return DEFAULT_TIMEOUT_S
    seconds = float(text)
    if not 0 < seconds <= MAX_TIMEOUT_S:  # nan and inf too
        raise ValueError(text)
    return seconds


def _read_stdin() -> bytes:
    """All of stdin, at most one byte past the largest request (which is refused)."""
    data = b""
    while len(data) <= MAX_REQUEST_BYTES:
        try:
            chunk = os.read(0, MAX_REQUEST_BYTES + 1 - len(data))
        except OSError:
            return data  # no stdin: the shim says what it read
        if not chunk:
            break
        data += chunk
    return data


class _Call:
    """What this process's signal handler needs to know: one object, as
    :class:`kata_mem.interfaces.main.Stops` is once kata-mem answers here."""

    #: The service's answer is being written: a signal lets it finish, as the shim does.
    answering = False
    #: A first signal is being answered: a second one changes nothing (issue 33, item 9:
    #: it ran the handler again half way through the first's imports, a traceback).
    stopping = False
    #: kata-mem's own entry is being imported: a signal waits for its handler (this one
    #: would import the same modules half way through), and this is the one it waits as.
    deferred = False
    pending: Optional[int] = None


_CALL = _Call()


def _stopped(signum: int, frame: object) -> None:
    """SIGINT or SIGTERM while the service works: the shim's own answer to them (one
    line, its error document, 130 or 143); the service finishes what it began."""
    if _CALL.answering or _CALL.stopping:
        return
    if _CALL.deferred:
        if _CALL.pending is None:
            _CALL.pending = signum
        return
    _CALL.stopping = True
    from kata_mem.interfaces.main import STOPS
    from kata_mem.interfaces.pipes import own_stdio

    own_stdio()  # the shim's stdout, on which nothing has been written yet
    STOPS.shim = True
    STOPS.stop(signum, None)


def _answer_here(
    argv: list[str], request: Optional[bytes], path: str, refusal: Optional[KataMemError] = None
) -> NoReturn:
    """``kata-mem ARGV`` in this process (the shim, on ``request`` when it was read),
    answering for the service at ``path`` (:func:`kata_mem.interfaces.shim.run_shim`), or
    refusing with ``refusal``."""
    _CALL.deferred = True
    from kata_mem.interfaces import main as entry

    entry.STOPS.install()
    if _CALL.pending is not None:  # came while kata-mem was being imported
        from kata_mem.interfaces.pipes import own_stdio

        own_stdio()
        entry.STOPS.shim = True
        entry.STOPS.stop(_CALL.pending, None)
    entry.run(argv, request, service=path, refusal=refusal)


def main() -> None:
    """The ``kata-mem-shim`` process."""
    args = sys.argv[1:]
    path = os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET
    if args:
        # Options and --help are the shim's own: it reads its request itself.
        _answer_here(["shim", *args], None, path)
    request = _read_stdin()
    if len(request) > MAX_REQUEST_BYTES:
        _answer_here(["shim"], request, path)  # refused, as the service would
    given = os.environ.get(TIMEOUT_ENV)
    try:
        seconds = timeout_s(given)
    except ValueError:
        from kata_mem.core.errors import ConfigError

        _answer_here(
            ["shim"],
            request,
            path,
            ConfigError(
                f"{TIMEOUT_ENV}={given!r}: expected how many seconds kata-mem-shim waits for "
                f"kata-mem serve, a number above 0 and at most {MAX_TIMEOUT_S:g} (unset: "
                f"{DEFAULT_TIMEOUT_S:g}); nothing was sent"
            ),
        )
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stopped)
    try:
        answered = ask_service(path, request, time.monotonic() + seconds)
    except Late as late:
        _answer_here(["shim"], request, path, _late(path, seconds, late.sent))
    if answered is None:
        _answer_here(["shim"], request, path)
    document, code = answered
    _CALL.answering = True
    if document.startswith(_ERROR_DOCUMENT):
        _say_error(document)
    try:
        _write_all(document)
    except OSError:
        # As the shim: its reader is gone (141), or stdout cannot take it (74).
        _answer_lost()
    sys.exit(code)


def _late(path: str, seconds: float, sent: bool) -> KataMemError:
    """The error that answers when the deadline passed before the service answered."""
    from kata_mem.core.errors import BackendUnavailable

    waited = f"within {seconds:g} s ({TIMEOUT_ENV})"
    if sent:
        return BackendUnavailable(
            f"kata-mem serve at {path} took the request but did not answer {waited}: it may "
            "still carry it out; the next call on the sandbox answers from what it did"
        )
    return BackendUnavailable(
        f"kata-mem serve at {path} did not take the request {waited}: nothing was sent, so "
        "nothing was done; call again"
    )


def _say_error(document: bytes) -> None:
    """The line ``kata-mem shim`` writes on stderr when it refuses a request (its
    ``protocol.refused``, in the text format of a shim given no options), for a refusal the
    service answered: where a runtime logs it (issue 33, item 11). Lost, as any diagnostic,
    when stderr cannot take it."""
    import json

    try:
        message = json.loads(document)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return
    if not isinstance(message, str):
        return
    encoding = getattr(sys.stderr, "encoding", None) or "utf-8"
    line = f"kata-mem shim: error: {message}\n".encode(encoding, "backslashreplace")
    try:
        while line:
            line = line[os.write(2, line) :]
    except OSError:
        pass


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _answer_lost() -> NoReturn:
    """Exit as ``kata-mem shim`` does when stdout does not take its answer."""
    from kata_mem.interfaces.pipes import ResultLost, lost

    exc = sys.exc_info()[1]
    assert isinstance(exc, OSError)
    sys.exit(lost(ResultLost(exc)))


if __name__ == "__main__":
    main()
