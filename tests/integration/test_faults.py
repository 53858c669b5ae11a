"""Fault injection on the real guest (and the scripted QMP server for what a real QEMU
cannot do on demand): after each fault, the next call converges to the truth.
The documentation's fault table lists each case with its outcome and the state after."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kata_mem.backends.qmp import QmpBackend
from kata_mem.core.backing import dimm_backend
from kata_mem.core.errors import BackendUnavailable
from kata_mem.core.model import Container, Step, Workload
from kata_mem.edges.config import load_config
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked
from kata_mem.orchestration.reconcile import reconcile_all
from tests.support.cli import CliResult, apply_qmp, kata_mem_process
from tests.support.configs import HOST, HOST_ARGS, guest_config
from tests.support.fake_qmp import FakeQemu, FakeQmpServer
from tests.support.guestvm import BootGuest, GuestSpec, GuestVM
from tests.support.qmp_min import QMPClient

Run = Callable[..., CliResult]
MiB = 1 << 20


class KillsQemu(QmpBackend):
    """The real backend; QEMU is killed right after the step's commands are sent."""

    pid: int

    def begin(self, step: Step) -> None:
        super().begin(step)
        os.kill(self.pid, signal.SIGKILL)


@pytest.mark.guest
def test_qemu_killed_mid_step(boot_guest: BootGuest, run_cli: Run, tmp_path: Path) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg_path = guest_config(tmp_path, virtio=False)

    def connect() -> QmpBackend:
        backend = KillsQemu.connect(
            str(vm.qmp_socket), dimm_backend=dimm_backend(load_config(cfg_path))
        )
        assert isinstance(backend, KillsQemu)
        backend.pid = vm.pid
        return backend

    request = Workload((Container("c", 256 * MiB),))
    with pytest.raises(BackendUnavailable) as lost:
        run_locked(
            SandboxState(tmp_path / "state", "sb"),
            connect,
            load_config(cfg_path),
            HOST,
            request,
            Options(),
        )
    # Said in the user's terms (exit 6), not in qemu.qmp's ("StateError: QMPClient is
    # disconnecting. Call disconnect() to return to IDLE state.").
    message = lost.value.message
    assert lost.value.exit_code == 6 and "the VM went away during " in message, message
    assert f"QEMU (pid {vm.pid})" in message, message
    for qmp_words in ("StateError", "ExecInterruptedError", "disconnect()", "Disconnected"):
        assert qmp_words not in message, message
    vm.wait_exit(10)
    # The next call: the VM is gone, and says so; the journal still shows the step in flight.
    code, doc = apply_qmp(run_cli, cfg_path, vm.qmp_socket, "--limit", "256Mi")
    assert code == 6 and doc["error"]["kind"] == "backend-unavailable"
    journal = json.loads((tmp_path / "state" / "sb" / "journal.json").read_text())
    assert (journal["state"], journal["step"]["action"]) == ("running", "plug_dimm")
    # reconcile forgets a sandbox whose VM is gone.
    (visit,) = reconcile_all(str(tmp_path / "state"), {})
    assert (visit.sandbox, visit.action) == ("sb", "cleaned"), visit
    assert not (tmp_path / "state" / "sb").exists()


def _qemu_memory(vm: GuestVM) -> tuple[dict[str, str], set[str]]:
    """QEMU's DIMMs (id -> backend object) and its memory backend objects."""
    with QMPClient(vm.qmp_socket) as q:
        dimms = {
            d["data"]["id"]: d["data"]["memdev"].removeprefix("/objects/")
            for d in q.execute("query-memory-devices")
            if d["type"] == "dimm"
        }
        listed = q.execute("qom-list", {"path": "/objects"})
        return dimms, {o["name"] for o in listed if o["type"].startswith("child<memory-backend")}


@pytest.mark.guest
def test_a_first_call_killed_midway_is_repaired_by_reconcile(
    boot_guest: BootGuest, tmp_path: Path
) -> None:
    """kill -9 (no cleanup) in a sandbox's first apply, just after ``device_add``:
    ``kata-mem reconcile`` finds the sandbox's request and its VM, settles the step, and
    the journal, QEMU and the guest's MemTotal agree; another tool's DIMM and backend
    object named like kata-mem's stay as they were. Before, the request was saved only
    when a call ended: reconcile skipped the sandbox ("no saved request (applied with
    --force only)") and left its journal running, with a VM it could not even find."""
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False)
    booted_kb = vm.status().total_kb
    with QMPClient(vm.qmp_socket) as q:  # another tool's, named like kata-mem's
        for oid, mib in (("kmmem5", 128), ("foreign0", 128)):
            q.execute(
                "object-add", {"qom-type": "memory-backend-ram", "id": oid, "size": mib * MiB}
            )
        q.execute("device_add", {"driver": "pc-dimm", "id": "kmdimm2", "memdev": "foreign0"})
    with_foreign = vm.wait_mem(lambda m: m.total_kb >= booted_kb + 128 * 1024, timeout=15)
    r = kata_mem_process(
        "apply", "--config", str(cfg), "--qmp", str(vm.qmp_socket), "--sandbox", "sb",
        "--limit", "256Mi", *HOST_ARGS, "--json", env={"KATA_MEM_CRASH_AT": "after-command"},
    )  # fmt: skip
    assert r.returncode == 99, r.stderr
    sandbox = tmp_path / "state" / "sb"
    journal = json.loads((sandbox / "journal.json").read_text())
    step = journal["step"]
    assert (journal["state"], journal["phase"], step["action"]) == (
        "running",
        "issued",
        "plug_dimm",
    )
    assert (step["device"], step["memdev"]) == ("kmdimm6", "kmmem6"), step

    (visit,) = reconcile_all(str(tmp_path / "state"), {})
    assert visit.outcome is not None, visit
    assert (visit.action, visit.outcome.status, visit.outcome.observed) == (
        "retried",
        "NoChange",
        768 * MiB,
    ), visit
    assert any("reconciled: the previous call stopped" in n.text for n in visit.notes)
    assert any(n.text.startswith("left alone: kmdimm2, kmmem5") for n in visit.notes)
    journal = json.loads((sandbox / "journal.json").read_text())
    assert (journal["state"], journal["step"], journal["observed_mib"]) == ("idle", None, 768)
    assert [(o["id"], o["memdev"], o["confirmed"]) for o in journal["owned"]] == [
        ("kmdimm6", "kmmem6", True)
    ]
    dimms, objects = _qemu_memory(vm)
    assert dimms == {"kmdimm2": "foreign0", "kmdimm6": "kmmem6"}
    assert {"kmmem5", "foreign0", "kmmem6"} <= objects
    want = with_foreign.total_kb + 128 * 1024
    assert vm.wait_mem(lambda m: m.total_kb >= want, timeout=15).total_kb == want


@pytest.mark.guest
def test_a_grow_killed_before_the_guest_showed_it_is_no_change_only_for_a_guest_that_answers(
    boot_guest: BootGuest, run_cli: Run, tmp_path: Path
) -> None:
    """kill -9 between ``device_add`` and the guest's confirmation, with a guest that no
    longer runs (paused here; one that died taking the DIMM is as silent): QEMU has the
    DIMM, so the next call has nothing to change, but it must not say so with exit 0,
    as it does not after a grow that timed out (``PlugTimeout``). Before, it said
    ``NoChange`` (exit 0) without asking the guest."""
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))
    cfg = guest_config(tmp_path, virtio=False, timeout=3)
    base_kb = vm.status().total_kb
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket)  # turns on the guest's statistics
    assert (code, doc["status"]) == (0, "NoChange"), doc
    with QMPClient(vm.qmp_socket) as q:
        q.execute("stop")
    r = kata_mem_process(
        "apply", "--config", str(cfg), "--qmp", str(vm.qmp_socket), "--sandbox", "sb",
        "--limit", "256Mi", *HOST_ARGS, "--json", env={"KATA_MEM_CRASH_AT": "after-command"},
    )  # fmt: skip
    assert r.returncode == 99, r.stderr
    assert _qemu_memory(vm)[0] == {"kmdimm0": "kmmem0"}
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi")
    assert (code, doc["status"], doc["reason"], doc["observed_mib"]) == (
        8,
        "InProgress",
        "PlugTimeout",
        768,
    ), doc
    assert "the guest has sent no memory statistics since" in doc["message"], doc
    with QMPClient(vm.qmp_socket) as q:
        q.execute("cont")
    want = base_kb + 256 * 1024
    assert vm.wait_mem(lambda m: m.total_kb >= want, timeout=30).total_kb == want
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "NoChange", 768), doc


@pytest.mark.guest
@pytest.mark.parametrize("damage", ["truncated", "corrupt", "empty"])
def test_damaged_journal(boot_guest: BootGuest, run_cli: Run, tmp_path: Path, damage: str) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    cfg = guest_config(tmp_path, virtio=True)
    assert apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "512Mi")[1]["status"] == "Resized"
    path = tmp_path / "state" / "sb" / "journal.json"
    text = path.read_text()
    path.write_text(
        {"truncated": text[: len(text) // 2], "corrupt": text.replace("{", "[", 1), "empty": ""}[
            damage
        ]
    )
    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "512Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "NoChange", 1024), doc
    assert any("corrupt or truncated" in w for w in doc["warnings"])
    assert json.loads(path.read_text())["observed_mib"] == 1024


@pytest.mark.guest
def test_unwritable_state_dir(boot_guest: BootGuest, run_cli: Run, tmp_path: Path) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    cfg = guest_config(tmp_path, virtio=True)
    before = vm.status().total_kb
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    r = run_cli(
        "apply",
        "--config",
        str(cfg),
        "--qmp",
        str(vm.qmp_socket),
        "--state-dir",
        str(blocker),
        "--limit",
        "512Mi",
        *HOST_ARGS,
    )
    assert (
        r.code == 3 and "cannot write the sandbox state" in r.err and "nothing was changed" in r.err
    )
    assert vm.status().total_kb == before
    code, doc = apply_qmp(
        run_cli, cfg, vm.qmp_socket, "--limit", "512Mi"
    )  # with a usable state dir
    assert (code, doc["status"]) == (0, "Resized")


@pytest.mark.guest
def test_twenty_concurrent_shim_calls_are_serialized(boot_guest: BootGuest, tmp_path: Path) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=2048))
    base_kb = vm.status().total_kb
    cfg = guest_config(tmp_path, virtio=True)
    request = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb-20",
        "event": "update",
        "config": str(cfg),
        "containers": [{"id": "c1", "state": "running", "memory_limit_bytes": 1 << 30}],
        "backend": {"type": "qmp", "socket": str(vm.qmp_socket)},
        "apply": True,
        "host": {"memory_bytes": HOST.memory, "cpus": HOST.cpus},
    }
    results: list[subprocess.CompletedProcess[str]] = []
    lock = threading.Lock()

    def call() -> None:
        r = kata_mem_process("shim", input=json.dumps(request), timeout=300)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=call) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.returncode for r in results] == [0] * 20, [
        r.stderr[-300:] for r in results if r.returncode
    ]
    statuses = sorted(json.loads(r.stdout)["outcome"]["status"] for r in results)
    assert statuses == ["NoChange"] * 19 + ["Resized"]
    assert {json.loads(r.stdout)["outcome"]["observed_mib"] for r in results} == {1536}
    want = base_kb + 1024 * 1024  # the 1 GiB limit, in kB
    assert vm.wait_mem(lambda m: m.total_kb >= want, timeout=10).total_kb == want


# -- reconcile, on the scripted QMP server -------------------------------------------------


@pytest.fixture
def fake(tmp_path: Path) -> Any:
    qemu = FakeQemu()
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as server:
        yield qemu, server


def test_reconcile_waits_for_the_backoff_then_retries(
    fake: Any, run_cli: Run, tmp_path: Path
) -> None:
    _qemu, server = fake
    cfg = guest_config(tmp_path, virtio=False, timeout=1)
    assert apply_qmp(run_cli, cfg, server.path, "--limit", "256Mi")[1]["status"] == "Resized"
    _code, doc = apply_qmp(run_cli, cfg, server.path, "--allow-shrink")  # no balloon: usage unknown
    assert (doc["status"], doc["reason"], doc["retry_after_s"]) == ("Deferred", "UsageUnknown", 30)
    # The saved request is the shrink; reconcile waits for the retry time, then retries.
    (visit,) = reconcile_all(str(tmp_path / "state"), {})
    assert visit.action == "waiting" and "retry in" in visit.detail
    (visit,) = reconcile_all(str(tmp_path / "state"), {}, clock=lambda: time.time() + 31)
    assert visit.outcome is not None
    assert (visit.action, visit.outcome.status, visit.outcome.retry_after_s) == (
        "retried",
        "Deferred",
        60,
    ), visit


def test_reconcile_settles_a_pending_unplug(run_cli: Run, tmp_path: Path) -> None:
    qemu = FakeQemu(balloon=True)
    with FakeQmpServer(tmp_path / "qmp.sock", qemu) as server:
        cfg = guest_config(tmp_path, virtio=False, timeout=1)
        assert apply_qmp(run_cli, cfg, server.path, "--limit", "256Mi")[1]["status"] == "Resized"
        qemu.guest_confirms = False
        _code, doc = apply_qmp(run_cli, cfg, server.path, "--allow-shrink")
        assert (doc["status"], doc["reason"]) == ("InProgress", "UnplugTimeout"), doc
        del qemu.devices["kmdimm0"]  # the guest finishes the eject later, unobserved
        (visit,) = reconcile_all(str(tmp_path / "state"), {})
        assert visit.outcome is not None
        assert (visit.action, visit.outcome.status, visit.outcome.observed) == (
            "retried",
            "NoChange",
            512 * MiB,
        )
        assert any("pending unplug of kmdimm0 completed" in n.text for n in visit.notes)
        assert qemu.objects == {}  # kmmem0 was deleted as an orphan


def test_reconcile_forgets_empty_state(tmp_path: Path) -> None:
    with SandboxState(tmp_path / "state", "ghost").locked(0):  # leaves the marker and lock
        pass
    (visit,) = reconcile_all(str(tmp_path / "state"), {})
    assert (visit.sandbox, visit.action) == ("ghost", "cleaned")
    assert not (tmp_path / "state" / "ghost").exists()


def test_reconcile_cli(fake: Any, run_cli: Run, tmp_path: Path) -> None:
    _qemu, server = fake
    cfg = guest_config(tmp_path, virtio=False)
    apply_qmp(run_cli, cfg, server.path, "--limit", "256Mi")
    r = run_cli("reconcile", "--state-dir", str(tmp_path / "state"), "--json")
    doc = json.loads(r.out)
    assert doc["schema"] == "kata-mem/reconcile/v1" and doc["sandboxes"][0]["action"] == "retried"
    server.close()
    r = run_cli("reconcile", "--state-dir", str(tmp_path / "state"))
    assert r.code == 0 and "sb: cleaned: the VM is gone" in r.out
