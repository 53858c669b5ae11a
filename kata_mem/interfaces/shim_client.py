"""``kata-mem-shim``: ``kata-mem shim`` handed to the node service when it runs.

A runtime shim execs this on every container event. It reads the request on stdin and,
when ``kata-mem serve`` listens on its socket (``$KATA_MEM_SOCKET``, else
``/run/kata-mem/kata-mem.sock``, serve's default), sends it there as ``POST /v1/shim`` and
writes the answer: the same document, byte for byte, and the same exit code as
``kata-mem shim`` in this process would (the service renders one line of JSON the way the
shim does and sends the exit code in ``X-Kata-Mem-Exit-Code``). The service has the
configuration, the host probe and the Python modules loaded already, so the call costs
little more than starting Python: this module imports only ``os``, ``sys`` and the C
socket module, never the rest of kata-mem, unless it answers itself.

It answers in this process, exactly as ``kata-mem shim`` does, when nothing listens there
(no socket, connection refused), when the socket's listener is neither root nor this
user (``SO_PEERCRED``: kata-mem runs as root and never takes a planted socket's word, as
its QMP backend does not), when the service refuses this caller (not root nor of its
``--group``), when the request is larger than the service takes, when the answer is not
a whole shim document, or when it is given arguments (``--help``, ``--print-schema``, the
global options). A request the service may have begun is safe to answer again: every
call takes the sandbox's lock and first reconciles its journal with the hypervisor
(docs/design/state.md).
"""

from __future__ import annotations

# The socket module's own import (selectors, its enums) costs as much again as what it
# wraps: the C module is all a unix stream socket needs.
import _socket
import os
import sys

#: Where ``kata-mem serve`` listens by default (``serve --socket``).
DEFAULT_SOCKET = "/run/kata-mem/kata-mem.sock"
SOCKET_ENV = "KATA_MEM_SOCKET"
#: The largest request the service and the shim take (``core.request.MAX_REQUEST_BYTES``;
#: a test keeps the two equal: importing it here would cost what this module saves).
MAX_REQUEST_BYTES = 1 << 20
#: What starts every shim response document (``protocol.Answer.document``), so that an
#: answer of another kind (an HTTP error of the service) is never passed on as one.
_SHIM_DOCUMENT = b'{"schema": "kata-mem/shim-response/v1"'
_EXIT_HEADER = b"x-kata-mem-exit-code"


def ask_service(path: str, request: bytes) -> tuple[bytes, int] | None:
    """The service's answer to ``request`` at socket ``path``: the document and the exit
    code; ``None`` when it cannot or must not answer (see the module's docstring)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            sock.connect(path)
        except OSError:
            return None  # absent, refused, not a socket: answered here
        if not _trusted(sock):
            return None
        head = (
            b"POST /v1/shim HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: " + str(len(request)).encode() + b"\r\n\r\n"
        )
        sock.sendall(head + request)
        chunks = []
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        sock.close()
    return _shim_answer(b"".join(chunks))


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


def _answer_here(request: bytes, args: list[str]) -> None:
    """``kata-mem [ARGS] shim`` in this process, on the request already read."""
    import io

    from kata_mem.interfaces.main import run

    sys.stdin = io.TextIOWrapper(io.BytesIO(request), encoding="utf-8")
    sys.argv = ["kata-mem", *args, "shim"]
    run()


#: Set once the answer is being written: a signal then lets it finish, as the shim does.
_answering = False


def _stopped(signum: int, frame: object) -> None:
    """SIGINT or SIGTERM while the service works: the shim's own answer to them (one
    line, its error document, 130 or 143); the service finishes what it began."""
    if _answering:
        return
    from kata_mem.interfaces import main as shim_main
    from kata_mem.interfaces.pipes import own_stdio

    own_stdio()  # the shim's stdout, on which nothing has been written yet
    shim_main._shim = True
    shim_main._interrupted(signum, None)


def main() -> None:
    """The ``kata-mem-shim`` process."""
    global _answering  # noqa: PLW0603 - the process's state, for its signal handler
    args = sys.argv[1:]
    request = b"" if args else _read_stdin()
    if not args and len(request) <= MAX_REQUEST_BYTES:
        import signal

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, _stopped)
        answered = ask_service(os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET, request)
        if answered is not None:
            document, code = answered
            _answering = True
            try:
                _write_all(document)
            except OSError:
                # As the shim: its reader is gone (141), or stdout cannot take it (74).
                _answer_lost()
            sys.exit(code)
    if args:
        # Options and --help are the shim's own: it reads its request itself.
        from kata_mem.interfaces.main import run

        sys.argv = ["kata-mem", "shim", *args]
        run()
        return
    _answer_here(request, [])


def _write_all(data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _answer_lost() -> None:
    """Exit as ``kata-mem shim`` does when stdout does not take its answer."""
    from kata_mem.interfaces.pipes import ResultLost, lost

    exc = sys.exc_info()[1]
    assert isinstance(exc, OSError)
    sys.exit(lost(ResultLost(exc)))


if __name__ == "__main__":
    main()
