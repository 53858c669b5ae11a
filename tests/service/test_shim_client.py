"""``kata-mem-shim`` (kata_mem/interfaces/shim_client.py) as a real process: with a real
``kata-mem serve`` it hands the request over the unix socket and writes the service's
answer, byte for byte what ``kata-mem shim`` writes, with its exit code; without one, or
with a listener it must not trust, it answers in-process as ``kata-mem shim`` does."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from kata_mem.core.request import MAX_REQUEST_BYTES
from kata_mem.interfaces import shim_client
from tests.support.configs import small_vm_config, write_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import REPO
from tests.support.service import Service, start
from tests.support.shim import request, sandbox_update
from tests.support.waits import wait_until

CLIENT = [sys.executable, "-m", "kata_mem.interfaces.shim_client"]
SHIM = [sys.executable, "-m", "kata_mem", "shim"]


def run(
    argv: list[str],
    doc: Any,
    sock: Optional[Path],
    timeout: float = 60,
    **extra: str,
) -> subprocess.CompletedProcess[bytes]:
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    env = {k: v for k, v in os.environ.items() if k != shim_client.SOCKET_ENV}
    if sock is not None:
        env[shim_client.SOCKET_ENV] = str(sock)
    env.update(extra)
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
    # The refusal's line on stderr too, where a runtime logs it: the service's answers
    # wrote none (issue 33, item 11).
    assert there.stderr == here.stderr and (b"error: " in there.stderr) == (code != 0)
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


# -- bounded waits (issue 33, items 3 and 10) ---------------------------------------------


def full_backlog(path: Path) -> tuple[socket.socket, list[socket.socket]]:
    """A listener at ``path`` that accepts no one, and the connections that fill its
    backlog (whatever its length)."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(0)
    held: list[socket.socket] = []
    while True:
        waiting = socket.socket(socket.AF_UNIX)
        waiting.setblocking(False)
        try:
            waiting.connect(str(path))
        except BlockingIOError:
            waiting.close()
            return listener, held
        held.append(waiting)


@pytest.mark.parametrize("doc", [request(), sandbox_update(1024)], ids=["update", "update-sandbox"])
def test_a_service_that_takes_the_request_and_never_answers_is_waited_for_until_the_deadline(
    tmp_path: Path, doc: dict[str, Any]
) -> None:
    """Before, the shim waited for ever (issue 33, item 3): now the deadline ends the wait
    with the shim's error document, which says that the service has the request."""
    listener = Listener(tmp_path / "kata-mem.sock", None)  # reads, never answers
    try:
        there = run(CLIENT, doc, listener.sock.getsockname(), KATA_MEM_SHIM_TIMEOUT="1.5")
    finally:
        listener.close()
    answer = json.loads(there.stdout)
    assert there.returncode == 6, there.stderr
    assert answer["error"]["kind"] == "backend-unavailable"
    message = answer["error"]["message"]
    assert "took the request but did not answer within 1.5 s (KATA_MEM_SHIM_TIMEOUT)" in message
    assert there.stderr.decode() == f"kata-mem shim: error: {message}\n"
    if doc["event"] == "update-sandbox":
        assert answer["cri"]["grpc_code"] == 14  # Unavailable: the kubelet retries
    assert listener.got.startswith(b"POST /v1/shim HTTP/1.1\r\n")


def test_a_service_whose_backlog_stays_full_is_waited_for_until_the_deadline(
    tmp_path: Path,
) -> None:
    """A connect(2) that finds the backlog full waits for room, up to the deadline: the
    request never reached the service, and the error says so. Before, the shim's blocking
    connect waited for ever."""
    path = tmp_path / "kata-mem.sock"
    listener, held = full_backlog(path)
    try:
        there = run(CLIENT, request(), path, KATA_MEM_SHIM_TIMEOUT="1")
        listener.setblocking(False)
        for _ in held:  # the service takes the ones before it, never the shim's
            listener.accept()[0].close()
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        for waiting in held:
            waiting.close()
        listener.close()
    answer = json.loads(there.stdout)
    assert (there.returncode, answer["error"]["kind"]) == (6, "backend-unavailable"), there.stderr
    assert "did not take the request within 1 s" in answer["error"]["message"]
    assert "nothing was sent" in answer["error"]["message"]


@pytest.mark.parametrize("given", ["0", "-1", "nan", "inf", "soon", "86401"])
def test_a_deadline_that_is_not_one_is_refused_before_anything_is_sent(
    tmp_path: Path, given: str
) -> None:
    listener = Listener(tmp_path / "kata-mem.sock", None)
    try:
        there = run(CLIENT, request(), listener.sock.getsockname(), KATA_MEM_SHIM_TIMEOUT=given)
        # Nothing reaches the listener: its thread still waits to accept.
        assert listener.thread.is_alive() and listener.got == b""
    finally:
        listener.close()
    answer = json.loads(there.stdout)
    assert (there.returncode, answer["error"]["kind"]) == (3, "config"), there.stderr
    assert answer["error"]["message"].startswith(f"KATA_MEM_SHIM_TIMEOUT={given!r}: expected")


class Flood:
    """A listener that answers with a head promising a body of 16 GiB and sends it until
    its reader hangs up, at most :attr:`CAP` bytes: what it sent says where the shim
    stopped reading."""

    CAP = 64 << 20

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(str(path))
        self.sock.listen(1)
        self.sent = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(30)
            got = b""
            try:
                while b"\r\n\r\n" not in got:
                    got += conn.recv(65536)
                head = (
                    b"HTTP/1.1 200 OK\r\nContent-Length: 17179869184\r\n"
                    b"X-Kata-Mem-Exit-Code: 0\r\n\r\n" + shim_client._SHIM_DOCUMENT
                )
                conn.sendall(head)
                self.sent = len(head)
                chunk = b" " * (1 << 16)
                while self.sent < self.CAP:
                    conn.sendall(chunk)
                    self.sent += len(chunk)
            except OSError:
                return


def test_an_answer_larger_than_the_shim_reads_is_not_read(tmp_path: Path) -> None:
    """A listener that would send 16 GiB: the shim stops reading past its bound and answers
    in-process, as for any answer that is not a whole shim document. Before, it read all
    that was sent (issue 33, item 10: 9 GB)."""
    flood = Flood(tmp_path / "kata-mem.sock")
    try:
        here, there = run(SHIM, request(), None), run(CLIENT, request(), tmp_path / "kata-mem.sock")
        flood.thread.join(60)
    finally:
        flood.sock.close()
    assert (there.returncode, there.stdout) == (0, here.stdout)
    assert flood.sent < Flood.CAP  # it hung up first
    assert flood.sent > shim_client.MAX_ANSWER_BYTES  # once past its bound


# -- signals (issue 33, item 9) -------------------------------------------------------------


def signalled_again_and_again(proc: subprocess.Popen[bytes], signum: int) -> None:
    """``signum`` to ``proc`` until it exits: a runtime that sends SIGTERM twice, and more.
    Some come while the first one's answer is being made: each answers as the first did."""
    while proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)
        time.sleep(0.002)  # not a wait: signals a few ms apart, until it exits


def test_a_second_sigterm_while_the_service_works_answers_as_the_first(tmp_path: Path) -> None:
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
        proc.stdin = None
        wait_until(lambda: b"\r\n\r\n" in listener.got, "the request reached the listener", 30)
        signalled_again_and_again(proc, signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        listener.close()
    assert proc.returncode == 143, err
    assert json.loads(out)["error"]["kind"] == "terminated"
    assert err.decode().count("\n") == 1 and b"Traceback" not in err, err


class HeldQemu(FakeQemu):
    """A VM whose monitor answers ``query-memory-devices`` only once let go."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = threading.Event()
        self.release = threading.Event()

    def handle(self, cmd: str, args: dict[str, Any]) -> Any:
        if cmd == "query-memory-devices":
            self.asked.set()
            self.release.wait(60)
        return super().handle(cmd, args)


def test_a_second_sigterm_while_answering_in_process_answers_as_the_first(
    tmp_path: Path,
) -> None:
    """No service: the shim answers in its own process, held by its VM's monitor, when the
    signals come (kata-mem's handler, main.Stops)."""
    qemu = HeldQemu()
    cfg = small_vm_config(tmp_path)
    with cfg.open("a") as f:
        f.write(f'state_dir = "{tmp_path / "state"}"\n')
    doc = request(
        config=str(cfg), apply=True, backend={"type": "qmp", "socket": str(tmp_path / "qmp.sock")}
    )
    with FakeQmpServer(tmp_path / "qmp.sock", qemu):
        env = {**os.environ, shim_client.SOCKET_ENV: str(tmp_path / "none.sock")}
        proc = subprocess.Popen(
            CLIENT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=REPO, env=env,
        )  # fmt: skip
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(doc).encode())
            proc.stdin.close()
            proc.stdin = None
            wait_until(qemu.asked.is_set, "the apply asks its VM for its memory", 60)
            signalled_again_and_again(proc, signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            qemu.release.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 143, err
    assert json.loads(out)["error"]["kind"] == "terminated"
    assert err.decode().count("\n") == 1 and b"Traceback" not in err, err


# -- one state per VM, wherever its call is answered (issue 33, item 2) -----------------------


def own_state_config(tmp_path: Path) -> Path:
    """The fake QMP VM's configuration, whose own state directory (``shim-state``) is not
    the service's: what a caller's configuration may say."""
    cfg = small_vm_config(tmp_path)
    with cfg.open("a") as f:
        f.write(f'state_dir = "{tmp_path / "shim-state"}"\n')
    return cfg


def test_answered_in_process_it_keeps_the_state_of_the_service(tmp_path: Path) -> None:
    """serve killed between two grows of one VM: the shim answers the second in its own
    process, in the service's state directory (its journal, its lock), not in the one its
    request's configuration names. Before, it opened a second journal and lock there, and
    the service's journal no longer said what the VM held."""
    where = tmp_path / "serve"
    where.mkdir()
    svc = start(where)
    cfg = own_state_config(tmp_path)
    qmp = tmp_path / "qmp.sock"

    def grow(mib: int) -> dict[str, Any]:
        backend = {"type": "qmp", "socket": str(qmp)}
        limit = [{"id": "c1", "memory_limit_bytes": mib << 20}]
        return request(config=str(cfg), apply=True, backend=backend, containers=limit)

    try:
        with FakeQmpServer(qmp, FakeQemu()):
            first = run(CLIENT, grow(256), svc.socket)
            assert json.loads(first.stdout)["outcome"]["status"] == "Resized", first.stderr
            svc.proc.kill()  # gone mid-life: its socket and lock stay
            svc.proc.wait(30)
            second = run(CLIENT, grow(1024), svc.socket)
    finally:
        svc.stop()
    answer = json.loads(second.stdout)
    assert (second.returncode, answer["outcome"]["status"]) == (0, "Resized"), second.stderr
    assert not (tmp_path / "shim-state").exists()
    journal = json.loads((svc.state / "sb-1" / "journal.json").read_text())
    assert journal["observed_mib"] == answer["plan"]["memory"]["target_mib"]


def test_answered_in_process_a_request_without_config_takes_the_services(
    tmp_path: Path,
) -> None:
    """serve stopped (cleanly: its record stays): a request whose ``config`` is null is
    planned with serve's ``--config``, as the service planned it, not with the caller's
    ``KATA_CONF_FILE``."""
    theirs = write_config(tmp_path / "serve.toml", {"default_memory": 1024})
    ours = write_config(tmp_path / "shim.toml", {"default_memory": 2048})
    where = tmp_path / "serve"
    where.mkdir()
    svc = start(where, "--config", str(theirs))
    doc = request(config=None)
    try:
        served = run(CLIENT, doc, svc.socket, KATA_CONF_FILE=str(ours))
    finally:
        assert svc.stop() == 0, svc.stderr()
    here = run(CLIENT, doc, svc.socket, KATA_CONF_FILE=str(ours))
    assert json.loads(served.stdout)["plan"]["memory"]["base_mib"] == 1024, served.stderr
    assert (here.returncode, here.stdout) == (0, served.stdout)


def test_without_the_record_of_the_services_state_nothing_is_applied_in_process(
    tmp_path: Path,
) -> None:
    """A socket file nobody listens on, and no record beside it (a serve older than the
    record, or one never started): where the service keeps its state is unknown, so an
    apply is refused (exit 6, nothing sent to the VM, no state made); a plan that names its
    configuration uses no state and is answered."""
    gone = tmp_path / "kata-mem.sock"
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(gone))
    dead.close()
    cfg = own_state_config(tmp_path)
    qemu = FakeQemu()
    with FakeQmpServer(tmp_path / "qmp.sock", qemu):
        backend = {"type": "qmp", "socket": str(tmp_path / "qmp.sock")}
        there = run(CLIENT, request(config=str(cfg), apply=True, backend=backend), gone)
    answer = json.loads(there.stdout)
    assert (there.returncode, answer["error"]["kind"]) == (6, "backend-unavailable"), there.stderr
    assert f"there is no {tmp_path / '.kata-mem.sock.service'}" in answer["error"]["message"]
    assert not qemu.commands and not (tmp_path / "shim-state").exists()
    here, plan = run(SHIM, request(), None), run(CLIENT, request(), gone)
    assert (plan.returncode, plan.stdout) == (0, here.stdout)


@pytest.mark.parametrize("spoil", ["others may write it", "another user's", "not JSON"])
def test_a_record_kata_mem_must_not_trust_is_not_followed(tmp_path: Path, spoil: str) -> None:
    where = tmp_path / "serve"
    where.mkdir()
    svc = start(where)
    assert svc.stop() == 0, svc.stderr()
    record = where / ".kata-mem.sock.service"
    assert json.loads(record.read_text())["state_dir"] == str(svc.state)
    if spoil == "others may write it":
        record.chmod(0o666)
    elif spoil == "another user's":
        os.chown(record, 65534, -1)
    else:
        record.write_text("{")
    cfg = own_state_config(tmp_path)
    qemu = FakeQemu()
    with FakeQmpServer(tmp_path / "qmp.sock", qemu):
        backend = {"type": "qmp", "socket": str(tmp_path / "qmp.sock")}
        there = run(CLIENT, request(config=str(cfg), apply=True, backend=backend), svc.socket)
    answer = json.loads(there.stdout)
    assert (there.returncode, answer["error"]["kind"]) == (3, "config"), there.stderr
    assert answer["error"]["message"].startswith(f"kata-mem serve's record {record}: ")
    assert not qemu.commands and not (tmp_path / "shim-state").exists()
    assert not (svc.state / "sb-1").exists()
