"""``kata-mem serve`` as a real process on a real unix socket, and clients for it:
``curl --unix-socket``, http.client over AF_UNIX, and raw HTTP on a socket."""

from __future__ import annotations

import fcntl
import http.client
import json
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tests.support.paths import REPO
from tests.support.waits import wait_until


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over a unix socket, as a Go shim's net/http with a unix dialer."""

    def __init__(self, path: str, timeout: float = 30) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Service:
    proc: subprocess.Popen[str]
    socket: Path
    state: Path
    log: Path
    args: Sequence[str] = field(default_factory=tuple)

    def request(
        self, method: str, path: str, body: Optional[bytes] = None, timeout: float = 30
    ) -> Answer:
        conn = UnixHTTPConnection(str(self.socket), timeout)
        try:
            conn.request(method, path, body=body)
            resp = conn.getresponse()
            return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def post(self, doc: Any, timeout: float = 30) -> Answer:
        raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
        return self.request("POST", "/v1/shim", raw, timeout)

    def curl(
        self, path: str, *args: str, user: Sequence[str] = (), data: Optional[bytes] = None
    ) -> subprocess.CompletedProcess[bytes]:
        """``curl --unix-socket``: stdout is the body, the last line the HTTP status."""
        cmd = [*user, "curl", "-sS", "--unix-socket", str(self.socket), "-w", "\n%{http_code}"]
        if data is not None:
            cmd += ["--data-binary", "@-", "-H", "Content-Type: application/json"]
        return subprocess.run(
            [*cmd, *args, f"http://localhost{path}"],
            input=data,
            capture_output=True,
            timeout=30,
            check=False,
        )

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        return self.log.read_text()


def curl_answer(r: subprocess.CompletedProcess[bytes]) -> tuple[int, bytes]:
    body, _, status = r.stdout.rpartition(b"\n")
    assert r.returncode == 0, r.stderr
    return int(status), body


def wait_ready(sock: Path, proc: subprocess.Popen[str], log: Path, timeout: float = 20) -> None:
    def healthy() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"kata-mem serve exited {proc.returncode}: {log.read_text()}")
        conn = UnixHTTPConnection(str(sock), 2)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    wait_until(healthy, lambda: f"kata-mem serve answers /healthz: {log.read_text()}", timeout)


def serve_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "kata_mem", "-v", "serve", *args]


def start(
    where: Path,
    *args: str,
    sock: Optional[Path] = None,
    argv: Optional[list[str]] = None,
    wait: bool = True,
    **popen: Any,
) -> Service:
    """``python -m kata_mem serve --socket WHERE/kata-mem.sock --state-dir WHERE/state ARGS``."""
    sock = sock or where / "kata-mem.sock"
    state = where / "state"
    log = where / f"serve-{time.monotonic_ns()}.log"
    argv = argv or serve_argv("--socket", str(sock), "--state-dir", str(state), *args)
    with log.open("w") as err:
        proc = subprocess.Popen(
            argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, text=True, **popen
        )
    service = Service(proc, sock, state, log, argv)
    if wait:
        wait_ready(sock, proc, log)
    return service


def all_read(sock: socket.socket) -> bool:
    """Whether the peer has read everything sent on the unix stream socket ``sock``: on a
    unix socket Linux's SIOCOUTQ (TIOCOUTQ) is the memory of the messages the peer has not
    read yet (net/unix/af_unix.c, unix_outq_len), 0 once it has read them all."""
    unread = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, struct.pack("i", 0))
    return bool(struct.unpack("i", unread)[0] == 0)


def read_response(sock: socket.socket, body: bool = True) -> bytes:
    """One response, headers and Content-Length body (not waiting for the server to close:
    aiohttp lingers to drain a body it refused). ``body`` False: the answer to a HEAD,
    which has the GET's Content-Length and no body (RFC 9110, 9.3.2)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if not body:
        return head + b"\r\n\r\n" + rest
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


#: ``python -c LAUNCHER SOCKET ARGV...``: binds SOCKET and passes it to ARGV as systemd's
#: socket activation does (fd 3, LISTEN_FDS, LISTEN_PID).
LAUNCHER = """
import os, socket, sys
path, argv = sys.argv[1], sys.argv[2:]
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.bind(path)
sock.listen(16)
if sock.fileno() != 3:
    os.dup2(sock.fileno(), 3)
os.set_inheritable(3, True)  # as systemd passes it
os.environ.update(LISTEN_FDS="1", LISTEN_PID=str(os.getpid()))
os.execv(argv[0], argv)
"""
