"""The backends name the VMM (QEMU) process in the observed VmState: for QMP the peer
of the monitor socket (SO_PEERCRED), for libvirt the pid in the QEMU driver's pid file
(checked against the process's ``-name guest=NAME``) and the domain's
``<memtune><hard_limit>``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kata_mem.backends.fake import FakeBackend
from kata_mem.backends.qmp import QmpBackend
from kata_mem.core.errors import BackendUnavailable
from kata_mem.core.model import VmState
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.waits import wait_until

MiB = 1 << 20
KiB = 1 << 10


def test_qmp_peer_is_the_process_serving_the_monitor(tmp_path: Path) -> None:
    # The scripted server runs in this process, so its pid is ours.
    with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as server:
        backend = QmpBackend.connect(str(server.path))
        try:
            first, second = backend.observe(), backend.observe()
        finally:
            backend.close()
    assert first.vmm_pid == second.vmm_pid == os.getpid()
    assert first.vmm_hard_limit is None


def test_qmp_retry_after_a_stray_event_still_finds_the_peer(tmp_path: Path) -> None:
    # The second attempt is a new socket: its peer is read again.
    qemu = FakeQemu(stray_events_before_greeting=1)
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as server:
        backend = QmpBackend.connect(str(server.path))
        try:
            assert backend.observe().vmm_pid == os.getpid()
        finally:
            backend.close()


def test_qmp_refused_is_still_gone(tmp_path: Path) -> None:
    path = tmp_path / "dead.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.close()  # the file stays, nobody listens: QEMU killed
    with pytest.raises(BackendUnavailable) as err:
        QmpBackend.connect(str(path))
    assert err.value.gone and "connection refused" in str(err.value)


def test_fake_backend_reports_the_pid_it_is_given() -> None:
    state = VmState(base=512 * MiB)
    assert FakeBackend(state).observe().vmm_pid is None
    assert FakeBackend(state, vmm_pid=4242).observe().vmm_pid == 4242


@pytest.mark.guest
def test_qmp_peer_of_a_real_guest_is_its_qemu(boot_guest: Any) -> None:
    vm = boot_guest()
    backend = QmpBackend.connect(str(vm.qmp_socket))
    try:
        assert backend.observe().vmm_pid == vm.pid
    finally:
        backend.close()


# -- libvirt ------------------------------------------------------------------------


@pytest.fixture
def libvirt_mod() -> Any:
    return pytest.importorskip("libvirt", reason="libvirt-python is part of the test extra")


@pytest.fixture
def sleeper() -> Iterator[Any]:
    """Start a process with a given argv tail; all are killed at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> int:
        code = "import time; time.sleep(60)"
        proc = subprocess.Popen([sys.executable, "-c", code, *args])
        procs.append(proc)
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        wait_until(  # empty until exec is done
            lambda: args[-1].encode() in cmdline.read_bytes(),
            "the sleeper shows its argv",
            10,
            0.01,
        )
        return proc.pid

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_libvirt_pid_file_is_trusted_only_for_its_guest(
    libvirt_mod: Any, sleeper: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kata_mem.backends.libvirt import qemu_pid

    env = {"XDG_RUNTIME_DIR": str(tmp_path)}  # the caller's, passed down
    # The process's own environment points elsewhere: it is never read past ``env``.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "not-this-one"))
    run = tmp_path / "libvirt" / "qemu" / "run"
    run.mkdir(parents=True)
    uri = "qemu:///session"
    ours = sleeper("-name", "guest=dom,,1,,x,debug-threads=on")
    other = sleeper("-name", "guest=dom,,1,,xy,debug-threads=on")
    assert qemu_pid(uri, "dom,1,x", env) is None  # no pid file
    (run / "dom,1,x.pid").write_text(str(ours))  # libvirt writes no newline
    assert qemu_pid(uri, "dom,1,x", env) == ours
    assert qemu_pid("qemu+ssh://elsewhere/session", "dom,1,x", env) is None
    assert qemu_pid("test:///default", "dom,1,x", env) is None
    (run / "dom,1,x.pid").write_text(f"{other}\n")  # a reused pid: another guest's QEMU
    assert qemu_pid(uri, "dom,1,x", env) is None
    for junk in ("", "abc", "0", "-1", "99999999"):
        (run / "dom,1,x.pid").write_text(junk)
        assert qemu_pid(uri, "dom,1,x", env) is None, junk


def test_libvirt_hard_limit_in_bytes_and_no_pid_on_the_test_driver(libvirt_mod: Any) -> None:
    from kata_mem.backends.libvirt import LibvirtBackend

    uri = "test:///default"
    conn = libvirt_mod.open(uri)
    name = f"kata-mem-vmm-{uuid.uuid4().hex[:8]}"
    dom = conn.defineXML(
        f"""<domain type='test'><name>{name}</name><uuid>{uuid.uuid4()}</uuid>
  <memory unit='MiB'>512</memory><vcpu>1</vcpu><os><type>hvm</type></os></domain>"""
    )
    try:
        dom.create()
        backend = LibvirtBackend.connect(uri, name, {})
        try:
            vm = backend.observe()
            assert (vm.vmm_pid, vm.vmm_hard_limit) == (None, None)  # unlimited
            dom.setMemoryParameters({"hard_limit": 786432}, libvirt_mod.VIR_DOMAIN_AFFECT_LIVE)
            assert backend.observe().vmm_hard_limit == 786432 * KiB
        finally:
            backend.close()
    finally:
        dom.destroy()
        dom.undefine()
        conn.close()


@pytest.mark.libvirt
def test_libvirt_domain_qemu_pid_and_hard_limit(libvirt_mod: Any, boot_libvirt_guest: Any) -> None:
    from kata_mem.backends.libvirt import LibvirtBackend

    guest = boot_libvirt_guest()
    pid_file = Path("/run/libvirt/qemu") / f"{guest.name}.pid"
    pid = int(pid_file.read_text().strip())
    assert Path(f"/proc/{pid}/comm").read_text().startswith("qemu")
    backend = LibvirtBackend.connect(guest.uri, guest.name, {})
    try:
        vm = backend.observe()
        assert (vm.vmm_pid, vm.vmm_hard_limit) == (pid, None)
        guest.virsh("memtune", guest.name, "--hard-limit", str(3 * 1024 * 1024))  # KiB
        assert backend.observe().vmm_hard_limit == 3 * 1024 * MiB
    finally:
        backend.close()
