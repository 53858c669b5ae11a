"""The state directory's rules on the real guest: a call that does not get the lock
changes neither the VM nor the state, and reconcile forgets a VM that was killed even
when its configuration file is gone too."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from tests.support.cli import CliResult, apply_qmp
from tests.support.configs import guest_config
from tests.support.guestvm import BootGuest, GuestSpec
from tests.support.state_dir import snapshot, still_locked

Run = Callable[..., CliResult]
pytestmark = pytest.mark.guest


def test_busy_then_killed_vm_without_its_configuration(
    boot_guest: BootGuest,
    run_cli: Run,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lock_holder: Callable[[Path], subprocess.Popen[str]],
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False)
    state = tmp_path / "state"
    assert apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi")[1]["status"] == "Resized"
    total = vm.status().total_kb
    # Another call holds the sandbox's lock: one wait, then Busy, and nothing changes.
    holder = lock_holder(state / "sb" / "lock")
    before = snapshot(state)
    monkeypatch.setattr("kata_mem.orchestration.executor.LOCK_WAIT_S", 1.0)
    started = time.monotonic()
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "1Gi")
    assert (code, doc["status"], doc["reason"]) == (0, "Deferred", "Busy"), doc
    assert time.monotonic() - started < 3.0
    assert snapshot(state) == before and still_locked(state / "sb" / "lock")
    assert vm.status().total_kb == total
    holder.kill()
    holder.wait()
    # QEMU is killed (its socket file stays) and the configuration is deleted.
    os.kill(vm.pid, signal.SIGKILL)
    vm.wait_exit(10)
    assert vm.qmp_socket.exists()
    cfg.unlink()
    r = run_cli("reconcile", "--state-dir", str(state))
    assert r.code == 0 and r.out.startswith("sb: cleaned: the VM is gone"), r
    assert not (state / "sb").exists()
