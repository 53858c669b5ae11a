"""``kata-mem-shim`` (kata_mem/interfaces/shim_client.py) as a real process: with a real
``kata-mem serve`` it hands the request over the unix socket and writes the service's
answer, byte for byte what ``kata-mem shim`` writes, with its exit code; without one, or
with a listener it must not trust, it answers in-process as ``kata-mem shim`` does."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from kata_mem.core.request import MAX_REQUEST_BYTES
from kata_mem.interfaces import shim_client
from tests.support.paths import REPO
from tests.support.service import Service, start
from tests.support.shim import request
from tests.support.waits import wait_until

CLIENT = [sys.executable, "-m", "kata_mem.interfaces.shim_client"]
SHIM = [sys.executable, "-m", "kata_mem", "shim"]


def run(
    argv: list[str], doc: Any, sock: Optional[Path], timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    env = {k: v for k, v in os.environ.items() if k != shim_client.SOCKET_ENV}
    if sock is not None:
        env[shim_client.SOCKET_ENV] = str(sock)
    return subprocess.run(
        argv, input=raw, capture_output=True, timeout=timeout, cwd=REPO, env=env, check=False
    )


def shim_calls(service: Service) -> float:
    """How many POST /v1/shim the service has answered on its socket."""
    text = service.request("GET", "/metrics").body.decode()
    prefix = 'kata_mem_request_seconds_count{endpoint="shim",listener="unix"} '
    line = next((ln for ln in text.splitlines() if ln.startswith(prefix)), prefix + "0")
    return float(line[len(prefix) :])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    svc = start(tmp_path_factory.mktemp("serve"))
    try:
        yield svc
    finally:
        assert svc.stop() == 0, svc.stderr()


@pytest.mark.parametrize(
    ("name", "doc", "code"),
    [
        ("plan", request(), 0),
        ("bad-field", request(containers=[{"id": "c", "memory_limit_bytes": "5Gi"}]), 4),
        ("not-json", b"{nope", 4),
        ("update-sandbox-refused", request(event="update-sandbox", containers=[],
                                           sandbox_resources={"memory_limit_bytes": 1 << 30},
                                           overhead={"memory_limit_bytes": -1}), 4),
    ],
)  # fmt: skip
def test_the_service_answers_byte_for_byte_as_the_shim(
    service: Service, name: str, doc: Any, code: int
) -> None:
    before = shim_calls(service)
    here = run(SHIM, doc, None)
    there = run(CLIENT, doc, service.socket)
    assert (there.returncode, here.returncode) == (code, code), (name, there.stderr)
    assert there.stdout == here.stdout and there.stdout.endswith(b"\n")
    assert shim_calls(service) == before + 1  # the service answered it, not this process


def test_without_a_service_it_answers_in_process(tmp_path: Path) -> None:
    gone = tmp_path / "kata-mem.sock"
    for doc in (request(), b"[]"):
        here, there = run(SHIM, doc, None), run(CLIENT, doc, gone)
        assert (there.returncode, there.stdout) == (here.returncode, here.stdout)
    # Nothing listening on a socket file (a stopped service) is the same.
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(gone))
    dead.close()
    here, there = run(SHIM, request(), None), run(CLIENT, request(), gone)
    assert (there.returncode, there.stdout) == (0, here.stdout)


def test_a_request_larger_than_the_service_takes_is_refused_in_process(
    service: Service,
) -> None:
    big = b" " * (MAX_REQUEST_BYTES + 1)
    before = shim_calls(service)
    here, there = run(SHIM, big, None), run(CLIENT, big, service.socket)
    assert (there.returncode, there.stdout) == (4, here.stdout)
    assert shim_calls(service) == before
    assert shim_client.MAX_REQUEST_BYTES == MAX_REQUEST_BYTES


class Listener:
    """A unix socket listener that records what it was sent and answers ``reply``."""

    def __init__(self, path: Path, reply: Optional[bytes]) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(1)
        self.got = b""
        self.reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(10)
            try:
                while b"\r\n\r\n" not in self.got or self.reply is None:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    self.got += chunk
                conn.sendall(self.reply)
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()


def test_a_listener_of_another_user_is_never_sent_the_request(tmp_path: Path) -> None:
    """The socket is there, but its listener runs as ``nobody`` (it could be anyone's
    planted socket): nothing is sent, the request is answered in-process."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a listener as nobody")
    where = Path(tempfile.mkdtemp(prefix="kata-mem-shim-client-"))  # nobody reaches it
    where.chmod(0o777)
    path = where / "kata-mem.sock"
    script = (
        "import socket,sys,time;s=socket.socket(socket.AF_UNIX);s.bind(sys.argv[1]);s.listen(1);"
        "print('up',flush=True);c,_=s.accept();c.settimeout(5);"
        "d=b''\ntry:\n while True:\n  x=c.recv(9)\n  if not x: break\n  d+=x\nexcept OSError: pass\n"
        "print(len(d),flush=True)"
    )
    planted = subprocess.Popen(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
         sys.executable, "-c", script, str(path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert planted.stdout is not None and planted.stdout.readline().strip() == "up"
        here, there = run(SHIM, request(), None), run(CLIENT, request(), path)
        assert (there.returncode, there.stdout) == (0, here.stdout)
        assert planted.stdout.readline().strip() == "0"  # not a byte of the request
    finally:
        planted.kill()
        planted.wait()
        assert planted.stdout is not None
        planted.stdout.close()
        shutil.rmtree(where)


@pytest.mark.parametrize(
    "reply",
    [
        # The service's refusal of a peer: an error document, not a shim answer.
        b"HTTP/1.1 403 Forbidden\r\nContent-Length: 41\r\nX-Kata-Mem-Exit-Code: 3\r\n\r\n"
        b'{"schema": "kata-mem/error/v1", "x": 1}\n\n',
        # A shim document cut short.
        b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\nX-Kata-Mem-Exit-Code: 0\r\n\r\n"
        b'{"schema": "kata-mem/shim-response/v1", ',
        # No exit code.
        b'HTTP/1.1 200 OK\r\nContent-Length: 41\r\n\r\n{"schema": "kata-mem/shim-response/v1"}\n',
    ],
)
def test_an_answer_that_is_not_a_whole_shim_document_is_answered_in_process(
    tmp_path: Path, reply: bytes
) -> None:
    listener = Listener(tmp_path / "kata-mem.sock", reply)
    try:
        here, there = (
            run(SHIM, request(), None),
            run(CLIENT, request(), listener.sock.getsockname()),
        )
        assert (there.returncode, there.stdout) == (0, here.stdout)
        assert listener.got.startswith(b"POST /v1/shim HTTP/1.1\r\n")
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("signum", "code", "kind"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_a_signal_while_the_service_works_is_the_shims_answer(
    tmp_path: Path, signum: int, code: int, kind: str
) -> None:
    listener = Listener(tmp_path / "kata-mem.sock", None)  # reads, never answers
    try:
        env = {**os.environ, shim_client.SOCKET_ENV: listener.sock.getsockname()}
        proc = subprocess.Popen(
            CLIENT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=REPO, env=env,
        )  # fmt: skip
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(request()).encode())
        proc.stdin.close()
        proc.stdin = None  # given whole: communicate() below only reads
        wait_until(lambda: b"\r\n\r\n" in listener.got, "the request reached the listener", 30)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        listener.close()
    doc = json.loads(out)
    assert proc.returncode == code, err
    assert (doc["schema"], doc["error"]["kind"]) == ("kata-mem/shim-response/v1", kind)
    assert err.decode().count("\n") == 1


def test_arguments_are_the_shims_own(tmp_path: Path) -> None:
    for args in (["--print-schema", "request"], ["--help"], ["--bogus"]):
        here = run([*SHIM, *args], b"", None)
        there = run([*CLIENT, *args], b"", tmp_path / "none.sock")
        assert (there.returncode, there.stdout, there.stderr) == (
            here.returncode,
            here.stdout,
            here.stderr,
        ), args
