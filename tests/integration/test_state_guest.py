"""The state directory's rules on the real guest: a call that does not get the lock
changes neither the VM nor the state, reconcile forgets a VM that was killed even
when its configuration file is gone too, and keeps one whose paths were given relative."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import CliResult, apply_qmp
from tests.support.configs import guest_config
from tests.support.guestvm import BootGuest, GuestSpec
from tests.support.paths import REPO
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


def test_relative_paths_are_saved_absolute_so_reconcile_elsewhere_keeps_the_vm(
    boot_guest: BootGuest, tmp_path: Path
) -> None:
    # Before: `apply --qmp qmp.sock` saved "qmp.sock" as given, and a `reconcile` run from
    # / (cron, systemd) said the live VM was gone and removed its state, so kata-mem's own
    # DIMM could never be proven its own again; a relative --host-cgroup was saved as
    # given and the next reconcile refused the request it had saved, pass after pass.
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False)
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "memory.max").write_text("max\n")
    here = vm.qmp_socket.parent

    def kata_mem(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kata_mem", *args],
            cwd=cwd,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    r = kata_mem(here, "apply", "--config", os.path.relpath(cfg, here),
                 "--qmp", vm.qmp_socket.name, "--host-cgroup", os.path.relpath(cgroup, here),
                 "--sandbox", "rel", "--limit", "256Mi", "--json")  # fmt: skip
    assert (r.returncode, json.loads(r.stdout)["status"]) == (0, "Resized"), r.stderr
    saved = json.loads((tmp_path / "state" / "rel" / "request.json").read_text())
    assert saved["backend"]["socket"] == str(vm.qmp_socket)
    assert saved["config"] == str(cfg) and saved["host"]["cgroup"] == str(cgroup)
    r = kata_mem(Path("/"), "reconcile", "--state-dir", str(tmp_path / "state"))
    assert (r.returncode, r.stdout) == (0, "rel: retried: NoChange\n"), r.stderr
    # Its DIMM is still provably kata-mem's: the shrink unplugs it.
    r = kata_mem(Path("/"), "apply", "--config", str(cfg), "--qmp", str(vm.qmp_socket),
                 "--sandbox", "rel", "--allow-shrink", "--json")  # fmt: skip
    assert (r.returncode, json.loads(r.stdout)["status"]) == (0, "Resized"), r.stdout
