"""Kubernetes in-place resize, driven the way the kubelet drives it, on one
real guest whose QEMU runs in a real memory cgroup standing for the pod cgroup.

The harness (:class:`Kubelet`) plays ``doPodResizeAction`` for the memory limit after
kubernetes PR #137555 (pkg/kubelet/kuberuntime/kuberuntime_manager.go): on a decrease
the containers are updated first (``UpdateContainerResources``: the shim's ``update``);
then ``UpdatePodSandboxResources`` (the shim's ``update-sandbox``), and only on success
the pod cgroup's limit is written; an error rejects the resize (a later sync retries it),
and a failed cgroup write sends the old resources again. kata-mem runs as a real process
(``kata-mem shim``), as a shim would call it.

The guest boots with 512 MiB (virtio-mem up to 2048 MiB more), sized with ``pod-limit``
(the VM is the pod's memory; the RuntimeClass overhead of 256 MiB pays for QEMU), so the
pod cgroup is the resources + 256 MiB. One guest serves the whole module (CI has 2
cores): each test first brings the pod to the size it starts from.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kata_mem.orchestration.reconcile import visit
from tests.support.cli import kata_mem_process
from tests.support.configs import guest_config
from tests.support.guestvm import GuestSpec
from tests.support.memcg import CgroupGuestVM, CgroupUnavailable, MemoryCgroup
from tests.support.paths import REPO
from tests.support.qmp_min import QMPClient
from tests.support.waits import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.guest
MiB, KiB_PER_MiB = 1 << 20, 1024
OVERHEAD_MIB = 256  # the RuntimeClass overhead.podFixed
SANDBOX = "pod"


@dataclass
class Kubelet:
    """The kubelet's side of one pod's memory resize. ``container_limits`` False is a pod
    with pod-level resources only (KEP-2837): its containers' limits do not change, so
    ``UpdatePodSandboxResources`` is the call that resizes the VM."""

    cfg: Path
    vm: CgroupGuestVM
    cg: MemoryCgroup
    resources_mib: int = 0
    #: What the guest kernel keeps of its boot memory out of MemTotal (MiB), read at boot.
    kept_mib: int = 0
    log: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)

    def request(self, event: str, mib: int) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": "kata-mem/shim-request/v1",
            "sandbox_id": SANDBOX,
            "event": event,
            "config": str(self.cfg),
            "backend": {"type": "qmp", "socket": str(self.vm.qmp_socket)},
            "apply": True,
            "allow_shrink": True,
            "host": {"memory_bytes": 16 << 30, "cpus": 4, "arch": "amd64"},
        }
        if event == "update-sandbox":
            doc["sandbox_resources"] = {
                "memory_limit_bytes": mib * MiB,
                "cpu_quota": -1,
                "cpu_period": 100000,
            }
            doc["overhead"] = {"memory_limit_bytes": OVERHEAD_MIB * MiB}
        else:
            doc["containers"] = [{"id": "c1", "memory_limit_bytes": mib * MiB}]
        return doc

    def runtime(self, event: str, mib: int) -> dict[str, Any]:
        """One call of the runtime: ``kata-mem shim`` as a real process."""
        r = kata_mem_process("shim", input=json.dumps(self.request(event, mib)), timeout=300)
        assert r.stdout.strip(), r.stderr
        doc: dict[str, Any] = json.loads(r.stdout)
        self.log.append((event, mib, doc))
        print(f"{event} {mib} MiB: exit {r.returncode}: {doc.get('cri') or doc['outcome']}")
        return doc

    def update_sandbox(self, mib: int) -> dict[str, Any]:
        return self.runtime("update-sandbox", mib)

    def resize(
        self, mib: int, *, container_limits: bool = False, cgroup_write_fails: bool = False
    ) -> dict[str, Any]:
        """``doPodResizeAction`` for the memory limit; the answer to the sandbox call."""
        old = self.resources_mib
        if container_limits and mib < old:
            self.runtime("update", mib)  # containers first on a decrease
        answer = self.update_sandbox(mib)
        if answer["cri"]["code"] != "OK":
            return answer  # rejected: the resize stays in progress, a later sync retries
        if cgroup_write_fails:  # SetPodCgroupConfig failed: tell the runtime to revert
            self.update_sandbox(old)
            return answer
        self.cg.set_limit(self.pod_limit(mib))
        self.resources_mib = mib
        if container_limits and mib > old:
            self.runtime("update", mib)  # containers after the pod cgroup on an increase
        return answer

    def ensure(self, mib: int) -> None:
        """Bring the pod to ``mib`` (a resize, and the next sync that completes a grow)."""
        if self.resources_mib != mib:
            assert self.resize(mib)["cri"]["code"] == "OK", self.log[-1]
            assert self.update_sandbox(mib)["cri"]["code"] == "OK", self.log[-1]
        self.reach(mib)

    def stats_available(self, mib: int) -> None:
        """Wait until the balloon statistics QEMU holds, which kata-mem reads the guest's
        MemAvailable from, show ``mib`` MiB available. After :meth:`GuestVM.free` they show
        the filled guest until its next report: a grow planned then is held to what that
        reading lets the guest's struct pages describe (cause guest_memmap), which is right,
        and not what a test of the pod cgroup is about."""

        def available() -> int:
            with QMPClient(self.vm.qmp_socket) as qmp:
                got = qmp.execute(
                    "qom-get", {"path": "/machine/peripheral/balloon0", "property": "guest-stats"}
                )
            return int(got["stats"].get("stat-available-memory", -1)) // MiB

        wait_until(lambda: available() >= mib, timeout=60, what=f"{mib} MiB available in stats")

    def reach(self, mib: int) -> None:
        """Wait until the guest's MemTotal shows a VM of ``mib``, a few MiB more or less."""
        self.vm.wait_mem(
            lambda s: abs(s.total_kb // KiB_PER_MiB + self.kept_mib - mib) <= 8, timeout=60
        )

    @staticmethod
    def pod_limit(mib: int) -> int:
        return (mib + OVERHEAD_MIB) * MiB


def guest_mib(vm: CgroupGuestVM) -> int:
    """The guest's MemTotal in MiB."""
    return vm.status().total_kb // KiB_PER_MiB


def journal(state_dir: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((state_dir / SANDBOX / "journal.json").read_text())
    return doc


@pytest.fixture(scope="module")
def pod(guest_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubelet]:
    """The pod: QEMU in a fresh memory cgroup of 2048 + 256 MiB, the VM grown to 2048 MiB
    as the pod's containers were created."""
    tmp = tmp_path_factory.mktemp("pod-resize")
    try:
        cg = MemoryCgroup.create("kata-mem-pod")
    except CgroupUnavailable as exc:
        pytest.skip(f"no memory cgroup for QEMU: {exc}")
    vm = CgroupGuestVM(guest_dir, tmp / "guest", GuestSpec(virtio_mem_mib=2048), cgroup=cg)
    try:
        cg.set_limit(Kubelet.pod_limit(2048))
        vm.start()
        # vmm_overhead_mib 128: TCG's translation buffer (docs, "Host-side guards").
        cfg = guest_config(tmp, virtio=True, vmm_overhead_mib=128, sizing="pod-limit")
        kubelet = Kubelet(cfg, vm, cg, 2048, kept_mib=512 - guest_mib(vm))
        created = kubelet.runtime("create", 2048)
        assert created["outcome"]["status"] == "Resized", created
        kubelet.reach(2048)
        yield kubelet
    finally:
        vm.stop()
        cg.remove()


def test_a_shrink_is_refused_while_the_guest_holds_memory_and_accepted_after(
    pod: Kubelet,
) -> None:
    pod.ensure(2048)
    assert pod.vm.alloc(1200).startswith("OK alloc")
    answer = pod.resize(768, container_limits=True)
    update = pod.log[-2][2]["outcome"]
    # The container-level update (a kubelet before PR #137555 stops here): Deferred, not forced.
    assert (update["status"], update["reason"]) == ("Deferred", "UsageAboveTarget"), update
    out = answer["outcome"]
    assert (out["status"], out["reason"]) == ("Deferred", "UsageAboveTarget"), out
    assert answer["cri"]["code"] == "Unavailable" and answer["cri"]["grpc_code"] == 14
    assert "the VM is unchanged at 2048 MiB" in answer["cri"]["message"]
    assert pod.cg.limit() == Kubelet.pod_limit(2048)  # the kubelet did not write it
    assert guest_mib(pod.vm) > 1900 and pod.vm.is_alive()

    pod.vm.free()
    answer = pod.resize(768, container_limits=True)  # the next sync retries
    assert answer["cri"]["code"] == "OK", answer
    assert "so the pod cgroup may be set" in answer["cri"]["message"]
    assert pod.cg.limit() == Kubelet.pod_limit(768)  # lowered, after the runtime said OK
    pod.reach(768)
    # The guest uses everything it has under the lower limit: QEMU is not OOM-killed.
    mib = pod.vm.status().avail_kb // KiB_PER_MiB - 56
    assert pod.vm.alloc(mib).startswith("OK alloc")
    charge = pod.cg.usage()
    print(f"guest filled {mib} MiB of 768: QEMU charged {charge // MiB} of 1024 MiB")
    assert pod.vm.is_alive() and pod.cg.oom_kills() == 0
    pod.vm.free()


def test_a_grow_waits_for_the_raised_cgroup_and_the_loop_completes_it(pod: Kubelet) -> None:
    pod.ensure(768)
    pod.stats_available(400)  # the grow is held by the pod cgroup, not the guest's memmap
    state_dir = pod.cfg.parent / "state"
    answer = pod.update_sandbox(1536)
    assert answer["cri"]["code"] == "OK", answer
    # Only what the limit in force (1024 MiB) allows: (1024 - 32 - 128) * 1024 / 1032.
    assert answer["outcome"]["observed_mib"] == 856, answer["outcome"]
    pending = journal(state_dir)["pending_grow"]
    assert pending["target_mib"] == 1536 and pending["limit_mib"] == 1024, pending
    # The service's loop (due only) leaves it while the limit is what it was...
    assert visit(str(state_dir), SANDBOX, dict(os.environ), due_only=True).action == "idle"
    pod.cg.set_limit(Kubelet.pod_limit(1536))  # the kubelet's cgroup write
    pod.resources_mib = 1536
    done = visit(str(state_dir), SANDBOX, dict(os.environ), due_only=True)
    assert done.action == "retried" and done.outcome is not None, done
    assert (done.outcome.status, done.outcome.observed) == ("Resized", 1536 * MiB), done
    pod.reach(1536)
    assert "pending_grow" not in journal(state_dir)
    assert pod.cg.oom_kills() == 0


def test_a_revert_after_a_failed_cgroup_write_undoes_the_shrink(pod: Kubelet) -> None:
    pod.ensure(1536)
    answer = pod.resize(1024, cgroup_write_fails=True)
    assert answer["cri"]["code"] == "OK" and answer["outcome"]["observed_mib"] == 1024, answer
    revert = pod.log[-1][2]
    assert revert["cri"]["code"] == "OK", revert
    assert (revert["outcome"]["status"], revert["outcome"]["observed_mib"]) == ("Resized", 1536)
    pod.reach(1536)
    record = journal(pod.cfg.parent / "state")
    assert record["deferred"] is None and "pending_grow" not in record, record
    assert pod.cg.limit() == Kubelet.pod_limit(1536) and pod.cg.oom_kills() == 0


def test_kata_mem_killed_between_the_vm_shrink_and_the_cgroup_write_is_repaired(
    pod: Kubelet,
) -> None:
    pod.ensure(1536)
    state_dir = pod.cfg.parent / "state"
    with subprocess.Popen(
        [sys.executable, "-m", "kata_mem", "shim"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        text=True,
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(pod.request("update-sandbox", 1024)))
        proc.stdin.close()

        def shrinking() -> bool:
            # The journal is replaced by a rename: a reader sees one version or the next.
            step = journal(state_dir)["step"] or {}
            return step.get("action") == "resize_virtio_mem" and step["delta"] < 0

        wait_until(shrinking, "kata-mem has begun a shrink step", timeout=120, interval=0.01)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
        # No answer: the kubelet's call fails, and it does not write the cgroup.
        assert proc.stdout.read() == ""
    assert pod.cg.limit() == Kubelet.pod_limit(1536)
    assert journal(state_dir)["state"] == "running"  # the step the kill cut short

    r = kata_mem_process("reconcile", "--json", "--config", str(pod.cfg), timeout=300)
    assert r.returncode == 0, r.stderr
    visited = {v["sandbox"]: v for v in json.loads(r.stdout)["sandboxes"]}
    assert visited[SANDBOX]["action"] == "retried", visited
    record = journal(state_dir)
    assert record["state"] == "idle" and record["step"] is None, record
    assert pod.vm.is_alive() and pod.cg.oom_kills() == 0
    print(f"after the kill and reconcile: guest {guest_mib(pod.vm)} MiB, {record['last_outcome']}")

    answer = pod.resize(1024)  # the kubelet's next sync
    assert answer["cri"]["code"] == "OK", answer
    assert pod.cg.limit() == Kubelet.pod_limit(1024)
    pod.reach(1024)
    assert pod.vm.is_alive() and pod.cg.oom_kills() == 0
