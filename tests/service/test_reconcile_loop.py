"""The service's own reconcile loop and balloon statistics from a sandbox's first
request, against the fake QEMU monitor (the real guests: test_service_guest.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.configs import GUEST_KERNEL_PARAMS, write_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import REPO
from tests.support.service import Service, start
from tests.support.shim import request
from tests.support.waits import wait_until

MiB = 1 << 20


def _config(tmp_path: Path) -> Path:
    return write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "memory_slots": 4,
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
        kata_mem={"step_timeout_s": 2},
    )


def _req(tmp_path: Path, qmp: Path, **fields: Any) -> dict[str, Any]:
    return request(
        sandbox_id="sb",
        config=str(_config(tmp_path)),
        backend={"type": "qmp", "socket": str(qmp)},
        host={"memory_bytes": 16 << 30, "cpus": 4},
        **fields,
    )


def _metric(svc: Service, line: str) -> float:
    """A sample of /metrics (0 when it has none yet)."""
    metrics = svc.request("GET", "/metrics").body.decode()
    found = re.search(rf"^{re.escape(line)} (\S+)$", metrics, re.M)
    return float(found.group(1)) if found else 0.0


def _watched(svc: Service) -> None:
    """Wait until the loop watches the sandbox's VM (a pidfd on the process listening on
    its monitor, inotify on the socket) and has visited it once, which proves that pid
    still listens: from then on nothing is asked of it until the kernel reports something."""
    wait_until(
        lambda: (
            _metric(svc, "kata_mem_reconcile_watched_vms") == 1
            and _metric(svc, 'kata_mem_reconcile_visits_total{action="idle"}') >= 1
        ),
        lambda: f"the loop watches the VM: {svc.stderr()}",
        timeout=20,
    )


def _quiet(svc: Service, seconds: float) -> None:
    """Nothing is visited for ``seconds`` (many intervals): nothing is pending."""
    visits = svc.request("GET", "/metrics").body.decode().count("kata_mem_reconcile_visits_total{")
    before = _metric(svc, 'kata_mem_reconcile_visits_total{action="idle"}')
    # not a wait: that nothing happens for this long is what is checked
    time.sleep(seconds)
    assert _metric(svc, 'kata_mem_reconcile_visits_total{action="idle"}') == before
    after = svc.request("GET", "/metrics").body.decode().count("kata_mem_reconcile_visits_total{")
    assert after == visits


def test_a_plan_only_request_never_touches_the_vm(tmp_path: Path) -> None:
    # Only an apply orders side effects: a create that only plans names the VM,
    # and the service neither connects to it nor sets its balloon's statistics.
    fake = FakeQemu(balloon=True, stats_interval=0)
    svc = start(tmp_path)
    try:
        with FakeQmpServer(tmp_path / "qmp.sock", fake) as qmp:
            got = svc.post(_req(tmp_path, qmp.path, event="create"))
            assert got.status == 200, got.body
            assert got.json()["outcome"] is None  # planned only
            assert (fake.commands, fake.stats_interval) == ([], 0)
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_the_loop_forgets_a_sandbox_whose_vm_is_gone(tmp_path: Path) -> None:
    svc = start(tmp_path, "--reconcile-interval", "0.2")
    try:
        with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as qmp:
            got = svc.post(_req(tmp_path, qmp.path, apply=True))
            assert (got.status, got.json()["outcome"]["status"]) == (200, "Resized"), got.body
            _watched(svc)
            _quiet(svc, 1.0)  # the VM is there, nothing is due: five intervals, no visit
            assert (svc.state / "sb").is_dir()
        # The VM is gone (its monitor socket with it); no request comes.
        wait_until(
            lambda: not (svc.state / "sb").exists(),
            lambda: f"the loop removes the state of sb: {svc.stderr()}",
        )
        assert "sb: cleaned: the VM is gone" in svc.stderr()
    finally:
        assert svc.stop() == 0, svc.stderr()


def test_the_loop_retries_a_deferred_shrink_when_it_is_due(tmp_path: Path) -> None:
    # The grow is bounded by what the guest has available: it uses little then,
    # and 700 MiB once grown, so that the shrink back is deferred.
    fake = FakeQemu(balloon=True, guest_used=64 * MiB)
    svc = start(tmp_path, "--reconcile-interval", "0.2")
    try:
        with FakeQmpServer(tmp_path / "qmp.sock", fake) as qmp:
            big = [{"id": "c1", "state": "running", "memory_limit_bytes": 512 * MiB}]
            got = svc.post(_req(tmp_path, qmp.path, apply=True, containers=big))
            assert got.json()["outcome"]["observed_mib"] == 1024, got.body
            fake.guest_used = 700 * MiB
            shrink = _req(tmp_path, qmp.path, apply=True, allow_shrink=True, containers=[])
            out = svc.post(shrink).json()["outcome"]
            assert (out["status"], out["reason"]) == ("Deferred", "UsageAboveTarget"), out
            journal = svc.state / "sb" / "journal.json"
            doc = json.loads(journal.read_text())
            assert doc["deferred"]["retry_at"] > time.time() + 20  # the 30 s backoff
            _watched(svc)
            time.sleep(1.0)  # not a wait: five intervals in which it must not be retried
            assert json.loads(journal.read_text())["observed_mib"] == 1024  # not due: left
            fake.guest_used = 64 * MiB
            # The backoff has passed (the clock moved on, as far as the journal says).
            doc["deferred"]["retry_at"] = time.time() - 1
            tmp = journal.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc))
            tmp.rename(journal)
            wait_until(
                lambda: json.loads(journal.read_text())["observed_mib"] == 512,
                lambda: f"the loop retries the shrink: {svc.stderr()}",
            )
            assert json.loads(journal.read_text())["deferred"] is None
            # The visit is counted after its journal is written: wait for the count.
            retried = 'kata_mem_reconcile_visits_total{action="retried"} 1.0'
            wait_until(lambda: retried in svc.request("GET", "/metrics").body.decode(), retried)
            metrics = svc.request("GET", "/metrics").body.decode()
            assert 'kata_mem_outcomes_total{reason="",status="Resized"}' in metrics
    finally:
        assert svc.stop() == 0, svc.stderr()


#: A VM as a process of its own: a scripted monitor on the socket ``argv[1]``, until killed.
_VM_PROCESS = """
import sys, time
from pathlib import Path
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.paths import REPO
FakeQmpServer(Path(sys.argv[1]), FakeQemu())
print("ready", flush=True)
time.sleep(600)
"""

#: Another process makes the deferred shrink of ``argv[1]`` (a journal) due now, as the
#: shim answering in its own process or an operator would change it.
_DUE_NOW = """
import json, sys, time
from pathlib import Path
journal = Path(sys.argv[1])
doc = json.loads(journal.read_text())
doc["deferred"]["retry_at"] = time.time() - 1
tmp = journal.with_name(".journal.json.1.tmp")
tmp.write_text(json.dumps(doc))
tmp.rename(journal)
"""


def test_the_kernel_tells_the_loop_a_vm_exited_and_a_journal_changed(tmp_path: Path) -> None:
    # Two minutes between two polls, and before the first full pass: what the loop does
    # within seconds below, it learns from the kernel (a pidfd on the VM's process, inotify
    # on the sandbox's directory), not from reading every sandbox again.
    svc = start(tmp_path, "--reconcile-interval", "120")
    vm_sock = tmp_path / "vm.sock"
    vm = subprocess.Popen(
        [sys.executable, "-c", _VM_PROCESS, str(vm_sock)], cwd=REPO, stdout=subprocess.PIPE
    )
    fake = FakeQemu(balloon=True, guest_used=64 * MiB)
    try:
        assert vm.stdout is not None and vm.stdout.readline() == b"ready\n"
        with FakeQmpServer(tmp_path / "qmp.sock", fake) as qmp:
            other = request(
                sandbox_id="vm",
                config=str(_config(tmp_path)),
                backend={"type": "qmp", "socket": str(vm_sock)},
                host={"memory_bytes": 16 << 30, "cpus": 4},
                apply=True,
            )
            got = svc.post(other)
            assert (got.status, got.json()["outcome"]["status"]) == (200, "Resized"), got.body
            # A deferred shrink of sb, as in the test above.
            big = [{"id": "c1", "state": "running", "memory_limit_bytes": 512 * MiB}]
            got = svc.post(_req(tmp_path, qmp.path, apply=True, containers=big))
            assert got.json()["outcome"]["observed_mib"] == 1024, got.body
            fake.guest_used = 700 * MiB
            shrink = _req(tmp_path, qmp.path, apply=True, allow_shrink=True, containers=[])
            out = svc.post(shrink).json()["outcome"]
            assert (out["status"], out["reason"]) == ("Deferred", "UsageAboveTarget"), out
            wait_until(
                lambda: _metric(svc, "kata_mem_reconcile_watched_vms") == 2,
                lambda: f"the loop watches both VMs: {svc.stderr()}",
                timeout=20,
            )
            fake.guest_used = 64 * MiB
            journal = svc.state / "sb" / "journal.json"
            subprocess.run([sys.executable, "-c", _DUE_NOW, str(journal)], check=True)
            wait_until(
                lambda: json.loads(journal.read_text())["observed_mib"] == 512,
                lambda: f"the loop retries the shrink: {svc.stderr()}",
                timeout=20,
            )
            # The VM's process dies; its socket file stays (nothing removed it): only the
            # process's exit tells.
            vm.kill()
            vm.wait(10)
            assert vm_sock.exists()
            wait_until(
                lambda: not (svc.state / "vm").exists(),
                lambda: f"the loop removes the state of vm: {svc.stderr()}",
                timeout=20,
            )
            assert "sandbox vm: cleaned: the VM is gone" in svc.stderr()
            assert (svc.state / "sb").is_dir()
            assert _metric(svc, "kata_mem_reconcile_full_passes_total") == 0
    finally:
        if vm.poll() is None:
            vm.kill()
            vm.wait(10)
        assert vm.stdout is not None
        vm.stdout.close()
        assert svc.stop() == 0, svc.stderr()


def test_a_vm_the_kernel_cannot_watch_is_asked_at_every_interval(tmp_path: Path) -> None:
    # A VMM whose pid the kernel did not give (a peer in another pid namespace: no pidfd
    # can be had, and no socket watch either): the loop asks its socket at every
    # interval, as it asked every VM before.
    svc = start(tmp_path, "--reconcile-interval", "0.2")
    try:
        with FakeQmpServer(tmp_path / "qmp.sock", FakeQemu()) as qmp:
            got = svc.post(_req(tmp_path, qmp.path, apply=True))
            assert (got.status, got.json()["outcome"]["status"]) == (200, "Resized"), got.body
            _watched(svc)
            saved = svc.state / "sb" / "request.json"
            doc = json.loads(saved.read_text())
            doc["backend"]["vmm"]["peer_pid"] = None
            tmp = saved.with_name(".request.json.1.tmp")
            tmp.write_text(json.dumps(doc))
            tmp.rename(saved)
            wait_until(
                lambda: _metric(svc, "kata_mem_reconcile_watched_vms") == 0,
                lambda: f"the loop no longer watches the VM: {svc.stderr()}",
            )
            idle = _metric(svc, 'kata_mem_reconcile_visits_total{action="idle"}')
            wait_until(
                lambda: _metric(svc, 'kata_mem_reconcile_visits_total{action="idle"}') >= idle + 2,
                "two more visits that found it there",
            )
        wait_until(
            lambda: not (svc.state / "sb").exists(),
            lambda: f"the loop removes the state of sb: {svc.stderr()}",
        )
        assert "sb: cleaned: the VM is gone" in svc.stderr()
    finally:
        assert svc.stop() == 0, svc.stderr()
