"""Whether a VM is there is the backend adapter's question, answered one way: the
presence check of ``reconcile`` and connecting decide each case alike. And a
saved request talks to the VMM it was applied to only: another
user's listener bound at the saved socket path, or another process listening on the
same socket, is "the VM is gone", never talked QMP to."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from kata_mem.backends import qmp, qmp_socket
from kata_mem.core.endpoint import Endpoint, VmmIdentity
from kata_mem.core.errors import BackendUnavailable
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.connect import open_backend, vm_gone
from kata_mem.orchestration.status import read_status
from tests.support.cli import CliResult
from tests.support.configs import GUEST_KERNEL_PARAMS, HOST_ARGS, write_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import REPO
from tests.support.service import start
from tests.support.waits import wait_until

Run = Callable[..., CliResult]
AS_NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")
NOBODY = 65534

#: A scripted QEMU in a process of its own, on ``bind PATH`` or on an inherited socket
#: ``fd N PATH`` (which its ``listen`` makes its own). It prints "listening", then, for
#: each line on stdin, what it saw: the connections it accepted and the QMP commands.
QEMU_PROCESS = r"""
import json, socket, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
how, path = sys.argv[2], Path(sys.argv[-1])
bound = socket.socket(fileno=int(sys.argv[3])) if how == "fd" else None
qemu = FakeQemu()
server = FakeQmpServer(path, qemu, bound)
print("listening", flush=True)
for _ in sys.stdin:
    print(json.dumps({"sessions": server.sessions, "commands": qemu.commands}), flush=True)
"""


class QemuProcess:
    """:data:`QEMU_PROCESS` as ``user`` (setpriv's arguments; () for root)."""

    def __init__(self, path: Path, user: tuple[str, ...] = (), fd: Optional[int] = None) -> None:
        how = ["bind"] if fd is None else ["fd", str(fd)]
        self.proc = subprocess.Popen(
            [*user, sys.executable, "-c", QEMU_PROCESS, str(REPO), *how, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            pass_fds=() if fd is None else (fd,),
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == "listening\n"

    def seen(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("?\n")
        self.proc.stdin.flush()
        seen: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return seen

    def stop(self) -> None:
        self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def sticky() -> Iterator[Path]:
    """A directory every user may create files in, as /tmp (mode 1777)."""
    where = Path(tempfile.mkdtemp(prefix="kata-mem-sticky-"))
    where.chmod(0o1777)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def _config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "memory_slots": 4,
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
        kata_mem={"state_dir": str(tmp_path / "state"), "step_timeout_s": 1},
    )


def _apply(run_cli: Run, cfg: Path, sock: Path) -> dict[str, Any]:
    r = run_cli(
        "apply", "--config", str(cfg), "--qmp", str(sock), "--sandbox", "sb", *HOST_ARGS,
        "--limit", "256Mi", "--json",
    )  # fmt: skip
    assert r.code == 0, r
    doc: dict[str, Any] = json.loads(r.out)
    return doc


def _saved_vmm(tmp_path: Path) -> dict[str, Any]:
    saved = json.loads((tmp_path / "state" / "sb" / "request.json").read_text())
    vmm: dict[str, Any] = saved["backend"]["vmm"]
    return vmm


# --- one decision for each case --------------------------------------------------


def _refused(path: Path) -> None:
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # QEMU killed: its socket file stays, nobody listens


def _symlink(path: Path) -> None:
    target = path.with_name("real.sock")
    _refused(target)
    path.symlink_to(target)


@pytest.mark.parametrize(
    ("make", "gone", "said"),
    [
        pytest.param(lambda p: None, True, "no such file", id="missing"),
        pytest.param(_refused, True, "connection refused", id="refused"),
        pytest.param(
            lambda p: p.write_text("x"),
            False,
            "is a regular file, not a unix socket",
            id="regular file",
        ),
        pytest.param(
            lambda p: p.mkdir(), False, "is a directory, not a unix socket", id="directory"
        ),
        pytest.param(
            _symlink,
            False,
            "is a symlink; refused as root",
            id="symlink as root",
            marks=pytest.mark.skipif(os.geteuid() != 0, reason="refused as root only"),
        ),
    ],
)
def test_the_presence_check_decides_as_connecting_does(
    tmp_path: Path, make: Callable[[Path], object], gone: bool, said: str
) -> None:
    path = tmp_path / "qmp.sock"
    make(path)
    endpoint = Endpoint("qmp", str(path))
    with pytest.raises(BackendUnavailable) as connecting:
        open_backend(endpoint, {})
    assert connecting.value.gone is gone and said in connecting.value.message
    if gone:
        assert vm_gone(endpoint) == connecting.value.message
    else:  # it cannot be told: reconcile reports what connecting would say
        with pytest.raises(BackendUnavailable) as asked:
            vm_gone(endpoint)
        assert (asked.value.gone, asked.value.message) == (False, connecting.value.message)


def test_a_busy_monitor_is_there_and_is_not_gone_to_a_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "qmp.sock"
    busy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    busy.bind(str(path))
    busy.listen(8)  # never accepts: QEMU serving another client
    monkeypatch.setattr(qmp, "CONNECT_TIMEOUT_S", 0.3)
    monkeypatch.setattr(qmp_socket, "PRESENCE_TIMEOUT_S", 0.3)
    try:
        assert vm_gone(Endpoint("qmp", str(path))) is None
        with pytest.raises(BackendUnavailable) as connecting:
            open_backend(Endpoint("qmp", str(path)), {})
        assert not connecting.value.gone and "no QMP greeting within" in connecting.value.message
    finally:
        busy.close()


def test_libvirt_decides_a_missing_domain_and_a_stopped_one_as_connecting_does() -> None:
    libvirt = pytest.importorskip("libvirt", reason="libvirt-python is part of the test extra")
    uri = "test:///default"
    assert vm_gone(Endpoint("libvirt", uri, "test")) is None
    missing = Endpoint("libvirt", uri, "no-such-domain")
    with pytest.raises(BackendUnavailable) as connecting:
        open_backend(missing, {})
    assert connecting.value.gone and vm_gone(missing) == connecting.value.message
    conn = libvirt.open(uri)
    name = f"kata-mem-stopped-{uuid.uuid4().hex[:8]}"
    dom = conn.defineXML(
        f"<domain type='test'><name>{name}</name><memory unit='MiB'>512</memory>"
        "<vcpu>1</vcpu><os><type>hvm</type></os></domain>"
    )
    try:
        stopped = Endpoint("libvirt", uri, name)
        with pytest.raises(BackendUnavailable) as connecting:
            open_backend(stopped, {})
        with pytest.raises(BackendUnavailable) as asked:
            vm_gone(stopped)
        assert not connecting.value.gone and "is not running" in connecting.value.message
        assert (asked.value.gone, asked.value.message) == (False, connecting.value.message)
    finally:
        dom.undefine()
        conn.close()


# --- the VMM a saved request was applied to ----------------------------------------


def test_the_saved_request_names_the_vmm_the_apply_reached(run_cli: Run, tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    sock = tmp_path / "qmp.sock"
    with FakeQmpServer(sock, FakeQemu()):
        assert _apply(run_cli, cfg, sock)["status"] == "Resized"
        st = sock.stat()
    assert _saved_vmm(tmp_path) == {
        "device": st.st_dev,
        "inode": st.st_ino,
        "owner_uid": os.geteuid(),
        "peer_uid": os.geteuid(),
        "peer_pid": os.getpid(),  # the scripted QEMU serves from a thread of this process
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's listener")
@pytest.mark.parametrize("forgotten_by", ["kata-mem reconcile", "the service's loop"])
def test_another_users_listener_at_a_saved_socket_path_is_never_talked_to(
    run_cli: Run, tmp_path: Path, sticky: Path, forgotten_by: str
) -> None:
    # Root's VM in a sticky directory; it exits, and nobody binds
    # the same path with a QMP server of its own.
    cfg = _config(tmp_path)
    sock = sticky / "qmp.sock"
    with FakeQmpServer(sock, FakeQemu()):
        assert _apply(run_cli, cfg, sock)["status"] == "Resized"
    impostor = QemuProcess(sock, AS_NOBODY)
    try:
        assert sock.stat().st_uid == NOBODY
        env = {k: v for k, v in os.environ.items() if k != "KATA_CONF_FILE"}
        if forgotten_by == "kata-mem reconcile":
            svc = start(tmp_path, "--reconcile-interval", "3600", env=env)
            try:
                got = svc.request("GET", "/v1/sandboxes/sb")
            finally:
                assert svc.stop() == 0, svc.stderr()
            assert got.status == 503, got.body
            assert "another socket than the one kata-mem applied through" in got.body.decode()
            r = run_cli("reconcile", "--state-dir", str(tmp_path / "state"))
            assert r.code == 0, r
            assert r.out.startswith(
                f"sb: cleaned: the VM is gone (QMP socket {sock}: another socket than the one "
                "kata-mem applied through ("
            ), r.out
            assert f"owner uid {NOBODY}; it was inode" in r.out
        else:
            svc = start(tmp_path, "--reconcile-interval", "0.2", env=env)
            try:
                wait_until(lambda: not (tmp_path / "state" / "sb").exists(), svc.stderr, timeout=20)
            finally:
                assert svc.stop() == 0, svc.stderr()
            assert "sb: cleaned: the VM is gone (QMP socket" in svc.stderr()
        assert not (tmp_path / "state" / "sb").exists()
        # Decided from the socket file alone: nobody's server was not even connected to.
        assert impostor.seen() == {"sessions": 0, "commands": []}
    finally:
        impostor.stop()


@pytest.mark.parametrize("user", ["nobody", "root"])
def test_another_process_listening_on_the_same_socket_is_the_vm_gone(
    run_cli: Run, tmp_path: Path, user: str
) -> None:
    # The socket file stays the one applied through; the process that listens on it
    # changes (a listen(2) on an inherited socket takes it over: unix(7), SO_PEERCRED).
    cfg = _config(tmp_path)
    sock = tmp_path / "qmp.sock"
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(sock))
    try:
        first = QemuProcess(sock, fd=bound.fileno())
        try:
            assert _apply(run_cli, cfg, sock)["status"] == "Resized"
        finally:
            first.stop()
        assert _saved_vmm(tmp_path)["peer_pid"] == first.proc.pid
        then = QemuProcess(sock, AS_NOBODY if user == "nobody" else (), fd=bound.fileno())
        try:
            saved = SandboxState(tmp_path / "state", "sb").saved_request()
            assert saved is not None and saved.endpoint is not None
            # Connecting through the saved request (GET /v1/sandboxes/ID) is refused ...
            with pytest.raises(BackendUnavailable) as connecting:
                read_status(saved.endpoint, "sb", str(tmp_path / "state"), {})
            uid = NOBODY if user == "nobody" else 0
            assert connecting.value.gone and connecting.value.message == (
                f"QMP socket {sock}: another process listens on it than the one kata-mem applied "
                f"through (uid {uid}, pid {then.proc.pid}; it was uid 0, pid {first.proc.pid}); "
                "the VM it led to is gone, and what listens there now is not talked to"
            )
            # ... and so is it to the presence check, which forgets the sandbox.
            r = run_cli("reconcile", "--state-dir", str(tmp_path / "state"))
            assert r.code == 0 and r.out.startswith("sb: cleaned: the VM is gone ("), r
            assert connecting.value.message in r.out
            # Both connected (a bare connect(2): who listens is known only then); neither
            # read the greeting of, nor sent a command to, the other listener.
            assert then.seen()["commands"] == []
        finally:
            then.stop()
    finally:
        bound.close()


def test_a_saved_vmm_that_is_this_one_is_talked_to(tmp_path: Path) -> None:
    sock = tmp_path / "qmp.sock"
    with FakeQmpServer(sock, FakeQemu()):
        opened = open_backend(Endpoint("qmp", str(sock)), {})
        opened.backend.close()
        vmm = opened.endpoint.vmm
        assert vmm == VmmIdentity(
            sock.stat().st_dev, sock.stat().st_ino, os.geteuid(), os.geteuid(), os.getpid()
        )
        assert vm_gone(opened.endpoint) is None
        again = open_backend(opened.endpoint, {})
        again.backend.close()
        assert again.endpoint == opened.endpoint


# --- a request saved before the pin (no backend.vmm) ---------------------------------


def _unpin(tmp_path: Path) -> bytes:
    """The saved request as a kata-mem older than the VMM pin wrote it: no ``vmm``."""
    path = tmp_path / "state" / "sb" / "request.json"
    saved = json.loads(path.read_text())
    del saved["backend"]["vmm"]
    path.write_text(json.dumps(saved))
    return path.read_bytes()


def _nobodys_socket(sock: Path) -> tuple[QemuProcess, Optional[socket.socket]]:
    return QemuProcess(sock, AS_NOBODY), None


def _nobodys_listener(sock: Path) -> tuple[QemuProcess, Optional[socket.socket]]:
    bound = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound.bind(str(sock))
    return QemuProcess(sock, AS_NOBODY, fd=bound.fileno()), bound


def _roots_in_a_directory_others_can_write(sock: Path) -> tuple[QemuProcess, None]:
    sock.parent.chmod(0o777)  # not sticky: anyone may rename the socket away and bind another
    return QemuProcess(sock), None


@pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's listener")
@pytest.mark.parametrize(
    ("listen", "why"),
    [
        pytest.param(_nobodys_socket, f"is owned by nobody (uid {NOBODY})", id="nobody's socket"),
        pytest.param(
            _nobodys_listener,
            "the process listening on it (pid {pid}) runs as nobody",
            id="nobody listens on root's socket",
        ),
        pytest.param(
            _roots_in_a_directory_others_can_write,
            "{dir} is owned by root (uid 0), mode 0777; another user could replace the socket",
            id="root's, in a directory others can write",
        ),
    ],
)
def test_a_request_saved_without_a_vmm_reaches_only_a_vmm_of_roots(
    run_cli: Run, tmp_path: Path, sticky: Path, listen: Callable[..., Any], why: str
) -> None:
    # Applied through root's QEMU by a kata-mem that saved no VMM;
    # root's QEMU exits, and what listens at the path now is not proven to be root's.
    cfg = _config(tmp_path)
    where = sticky
    sock = where / "qmp.sock"
    with FakeQmpServer(sock, FakeQemu()):
        assert _apply(run_cli, cfg, sock)["status"] == "Resized"
    saved_before = _unpin(tmp_path)
    journal_before = (tmp_path / "state" / "sb" / "journal.json").read_bytes()
    impostor, bound = listen(sock)
    try:
        said = why.format(pid=impostor.proc.pid, dir=where)
        saved = SandboxState(tmp_path / "state", "sb").saved_request()
        assert saved is not None and saved.endpoint is not None
        # GET /v1/sandboxes/ID reads through the saved request: refused, not "gone" ...
        with pytest.raises(BackendUnavailable) as reading:
            read_status(saved.endpoint, "sb", str(tmp_path / "state"), {})
        assert not reading.value.gone
        assert reading.value.message.startswith(f"QMP socket {sock}: "), reading.value.message
        assert said in reading.value.message
        assert "Nothing was sent and nothing was changed" in reading.value.message
        # ... and so is reconcile, which keeps the sandbox's state as it is.
        r = run_cli("reconcile", "--state-dir", str(tmp_path / "state"))
        assert r.code == 6, r
        assert r.out.startswith(f"sb: failed: QMP socket {sock}: "), r.out
        assert said in r.out and "does not say which VMM it was applied to" in r.out
        assert (tmp_path / "state" / "sb" / "request.json").read_bytes() == saved_before
        assert (tmp_path / "state" / "sb" / "journal.json").read_bytes() == journal_before
        assert impostor.seen()["commands"] == []
    finally:
        impostor.stop()
        if bound is not None:
            bound.close()


def test_a_request_saved_without_a_vmm_is_pinned_to_roots_vmm(run_cli: Run, tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    sock = tmp_path / "qmp.sock"
    with FakeQmpServer(sock, FakeQemu()):
        assert _apply(run_cli, cfg, sock)["status"] == "Resized"
    _unpin(tmp_path)
    again = QemuProcess(sock)
    try:
        r = run_cli("reconcile", "--state-dir", str(tmp_path / "state"))
        assert r.code == 0 and r.out.startswith("sb: retried: "), r
        assert _saved_vmm(tmp_path)["peer_pid"] == again.proc.pid
        assert again.seen()["commands"] != []
    finally:
        again.stop()


def test_a_monitor_whose_backlog_is_full_is_there(tmp_path: Path) -> None:
    """A listener that accepts no one, its backlog full (QEMU's monitor serving another
    client, others waiting): the VM is there, and a connect waits for room rather than
    fail. Before, a full backlog's EAGAIN was an error of presence's own ("no QMP
    session: BlockingIOError"), and connecting went on with an unconnected socket (issue
    33, item 12)."""
    path = tmp_path / "qmp.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen(0)
        held = []
        try:
            while True:  # fill the backlog, whatever its length
                waiting = socket.socket(socket.AF_UNIX)
                waiting.setblocking(False)
                try:
                    waiting.connect(str(path))
                except BlockingIOError:
                    waiting.close()
                    break
                held.append(waiting)
            assert qmp_socket.presence(str(path)) is None
            with pytest.raises(BlockingIOError):
                qmp_socket.dial(str(path), 0.05)  # waited, then said so
            held.append(listener.accept()[0])  # room again: one more fits
            qmp_socket.dial(str(path), 5).close()
        finally:
            for waiting in held:
                waiting.close()
