"""``kata-mem serve`` as a real process on a real unix socket, and clients for it:
``curl --unix-socket`` and http.client over AF_UNIX."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.conftest import REPO


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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"kata-mem serve exited {proc.returncode}: {log.read_text()}")
        conn = UnixHTTPConnection(str(sock), 2)
        try:
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        finally:
            conn.close()
        time.sleep(0.05)
    raise AssertionError(f"kata-mem serve not ready in {timeout} s: {log.read_text()}")


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


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service for a module's tests that need no process of their own."""
    where = tmp_path_factory.mktemp("serve")
    env = {k: v for k, v in os.environ.items() if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG")}
    svc = start(where, env=env)
    yield svc
    assert svc.stop() == 0, svc.stderr()


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """A directory every user can reach (pytest's tmp dirs are root's alone), for a
    socket that a client of another uid connects to."""
    import shutil
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="kata-mem-serve-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)
