"""In-place resize of Kata pods, end to end, with nothing patched: a real containerd
(tests/support/node.py: v2.3 and v2.4, built from their modules) hands the kubelet's CRI
calls to NRI, the NRI plugin kata-mem-nri (go/) carries them to a real ``kata-mem serve``,
and serve resizes a real TCG guest that stands for the pod's Kata VM.

The stand-in is faithful where kata-mem looks: the guest's QEMU runs in the pod's cgroup
(the pod's ``cgroup_parent``, a real v1 memory cgroup whose limit the test writes as the
kubelet does, resources + RuntimeClass overhead), with the boot memory Kata 4's runtime-rs
gives the pod (``overhead_memory`` 32 MiB + the pod's 480 MiB), DIMM slots and ``maxmem``,
and its QMP monitor where the plugin is told runtime-rs keeps it for that sandbox id. The
pods themselves run under runc behind a handler named as kata-deploy names runtime-rs's.

The test plays the kubelet of Kubernetes 1.36 (kubernetes PR #137555,
pkg/kubelet/kuberuntime/kuberuntime_manager.go doPodResizeAction): on an increase
UpdatePodSandboxResources first, then the pod cgroup, then the containers
(UpdateContainerResources); on a decrease the containers, then UpdatePodSandboxResources,
then the pod cgroup; a failed call rejects the resize (the cgroup is left alone) and a
later sync retries it. Every resize is judged by what the guest shows (its own MemTotal),
by the cgroup (its limit, no OOM kill) and by QEMU's life. One stack per containerd
series: the tests run in order on it, each from the size the last one left.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.support.guestvm import GuestSpec
from tests.support.memcg import CgroupGuestVM, CgroupUnavailable, MemoryCgroup
from tests.support.node import (
    KATA_HANDLER,
    RUNC_HANDLER,
    SERIES,
    CriStatus,
    Node,
    Rig,
    hierarchy_path,
    resources,
    running_node,
)
from tests.support.nri_plugin import NriPlugin, plugin_missing
from tests.support.service import Service, start
from tests.support.waits import wait_until

pytestmark = [pytest.mark.node, pytest.mark.guest]

MiB = 1 << 20
#: kata-deploy 4.x's RuntimeClass overhead for qemu-runtime-rs (podFixed memory).
OVERHEAD_MIB = 320
#: runtime-rs's overhead_memory for QEMU (src/runtime-rs/Makefile DEFOVERHEADMEMSZ_QEMU).
OVERHEAD_MEMORY_MIB = 32
#: The pod's memory at creation: runtime-rs boots it with 32 + 480 = 512 MiB.
BOOT_MIB = 480
GROWN_MIB = 1024


def kata_config(where: Path) -> Path:
    """A Kata 4 runtime-rs QEMU configuration as kata-deploy installs it, reduced to what
    sizing reads, for the test guest: static sizing, the sandbox cgroup only, pc-dimm
    hotplug into 8 slots under a 4 GiB maxmem, and the guest's movable onlining."""
    path = where / "configuration-qemu-runtime-rs.toml"
    path.write_text(
        "[hypervisor.qemu]\n"
        'path = "/usr/bin/qemu-system-x86_64"\n'
        "default_memory = 2048\n"
        f"overhead_memory = {OVERHEAD_MEMORY_MIB}\n"
        "default_maxmemory = 4096\n"
        "memory_slots = 8\n"
        'kernel_params = "memhp_default_state=online_movable"\n'
        "[runtime]\n"
        "static_sandbox_resource_mgmt = true\n"
        "sandbox_cgroup_only = true\n"
        "[kata_mem]\n"
        "step_timeout_s = 20\n"
    )
    return path


@dataclass
class Stack:
    """One node: containerd, serve, the plugin, and a Kata pod whose VM is the guest."""

    node: Node
    service: Service
    plugin: NriPlugin
    cg: MemoryCgroup
    vm: CgroupGuestVM
    pod: str
    ctr: str
    config: Path
    boot_total_kb: int
    #: The pod's resources as the kubelet last wrote them (MiB).
    resources_mib: int = BOOT_MIB
    log: list[tuple[str, int, CriStatus]] = field(default_factory=list)

    # -- what the kubelet does --------------------------------------------------------------
    def update_sandbox(self, mib: int) -> CriStatus:
        status = self.node.update_sandbox(
            self.pod, memory=mib * MiB, overhead=OVERHEAD_MIB * MiB, timeout=30
        )
        self.log.append(("UpdatePodSandboxResources", mib, status))
        return status

    def update_container(self, mib: int) -> CriStatus:
        """UpdateContainerResources through crictl; its gRPC failure as a status."""
        started = time.monotonic()
        done = self.node._crictl_run("update", "--memory", str(mib * MiB), self.ctr)
        ms = (time.monotonic() - started) * 1000
        status = (
            CriStatus("OK", "", ms)
            if done.returncode == 0
            else CriStatus("Error", done.stderr.strip(), ms)
        )
        self.log.append(("UpdateContainerResources", mib, status))
        return status

    def resize(self, mib: int, *, containers: bool = True) -> CriStatus:
        """doPodResizeAction for the memory limit; the failed call, or the sandbox's OK.
        ``containers`` False: a pod with pod-level resources only (KEP-5419)."""
        old = self.resources_mib
        if containers and mib < old:
            status = self.update_container(mib)
            if status.code != "OK":
                return status
        status = self.update_sandbox(mib)
        if status.code != "OK":
            return status
        self.cg.set_limit((mib + OVERHEAD_MIB) * MiB)
        self.resources_mib = mib
        if containers and mib > old:
            assert self.update_container(mib).code == "OK", self.log[-1]
        return status

    # -- what is there --------------------------------------------------------------------
    def sandbox(self) -> dict[str, Any]:
        """serve's view of the VM (GET /v1/sandboxes/ID: the hypervisor asked now)."""
        answer = self.service.request("GET", f"/v1/sandboxes/{self.pod}")
        assert answer.status == 200, answer.body
        doc: dict[str, Any] = answer.json()
        return doc

    def guest_shows(self, plugged_mib: int, timeout: float = 30) -> None:
        """The guest's own MemTotal is its boot MemTotal plus ``plugged_mib``."""
        want = self.boot_total_kb + plugged_mib * 1024
        self.vm.wait_mem(lambda m: m.total_kb == want, timeout=timeout)

    def healthy(self) -> None:
        """QEMU alive, never OOM-killed, and the guest answers."""
        assert self.vm.is_alive(), self.vm.console_tail()
        assert self.cg.oom_kills() == 0, f"OOM kills in {self.cg.path}"
        self.vm.status()

    def kata_mem_asked(self, pod: str) -> bool:
        """Whether kata-mem serve was asked anything about ``pod``."""
        return pod in self.service.log.read_text(errors="replace")


@pytest.fixture(scope="module", params=SERIES)
def stack(
    request: pytest.FixtureRequest, rig: Rig, guest_dir: Path, tmp_path_factory: Any
) -> Iterator[Stack]:
    missing = plugin_missing()
    if missing:
        pytest.fail(missing)
    where: Path = tmp_path_factory.mktemp(f"nri-{request.param}")
    config = kata_config(where)
    vm_root = Path(tempfile.mkdtemp(prefix="kmvm-", dir="/tmp"))
    try:
        cg = MemoryCgroup.create(f"kmnri{request.param.replace('.', '')}")
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    with cg, running_node(rig, request.param) as node:
        service = start(where, "--config", str(config))
        plugin = NriPlugin(
            node.nri_socket,
            service.socket,
            {KATA_HANDLER: config},
            {"runtime-rs": f"{vm_root}/{{id}}/qmp.sock"},
            where / "kata-mem-nri.log",
        ).start()
        vm: Optional[CgroupGuestVM] = None
        try:
            # The kubelet makes the pod cgroup with its limit before RunPodSandbox.
            cg.set_limit((BOOT_MIB + OVERHEAD_MIB) * MiB)
            pod = node.run_pod(
                "kata",
                KATA_HANDLER,
                hierarchy_path(cg.path),
                resources=resources(memory=BOOT_MIB * MiB),
                overhead=resources(memory=OVERHEAD_MIB * MiB),
            )
            # Kata would have booted the VM inside RunPodSandbox: here it boots now, at
            # the path the plugin derives from the sandbox id, in the pod's cgroup.
            workdir = vm_root / pod
            workdir.mkdir(mode=0o700)
            vm = CgroupGuestVM(
                guest_dir,
                workdir,
                GuestSpec(
                    base_mib=BOOT_MIB + OVERHEAD_MEMORY_MIB,
                    slots=8,
                    maxmem_mib=4096,
                    virtio_mem_mib=0,
                ),
                cgroup=cg,
            ).start()
            assert vm.qmp_socket == workdir / "qmp.sock"
            ctr = node.create_container(pod, "app", memory_limit=BOOT_MIB * MiB)
            made = Stack(node, service, plugin, cg, vm, pod, ctr, config, vm.status().total_kb)
            yield made
            service = made.service  # a test may have started it again
        finally:
            if vm is not None:
                vm.stop()
            plugin.stop()
            service.stop()
            shutil.rmtree(vm_root, ignore_errors=True)


def test_the_pod_is_registered_as_kata_booted_it(stack: Stack) -> None:
    """RunPodSandbox: the plugin asked kata-mem how Kata sized the VM (a plan: the
    runtime-rs static size, 32 + 480 MiB) and kata-mem touched nothing: it keeps no state
    for the sandbox until its first resize."""
    (line,) = stack.plugin.lines("register", stack.pod)
    assert "runtime=runtime-rs" in line and "static=true" in line, line
    assert f"boot_mib={OVERHEAD_MEMORY_MIB + BOOT_MIB}" in line, line
    assert stack.service.request("GET", f"/v1/sandboxes/{stack.pod}").status == 404
    assert stack.vm.status().total_kb == stack.boot_total_kb
    stack.healthy()


def test_a_pod_level_grow_reaches_the_guest_without_an_oom_kill(stack: Stack) -> None:
    """UpdatePodSandboxResources comes before the kubelet raises the pod cgroup: kata-mem
    grows only as far as the limit in force allows and answers OK at once; the rest
    follows once the cgroup is raised (the container's update, static sizing)."""
    limit_before = stack.cg.limit()
    status = stack.update_sandbox(GROWN_MIB)
    assert status.code == "OK", status
    assert status.elapsed_ms < stack.node.request_timeout * 1000, status
    # Within the pod cgroup in force: QEMU still fits it.
    assert stack.cg.usage() <= limit_before
    stack.healthy()
    stack.cg.set_limit((GROWN_MIB + OVERHEAD_MIB) * MiB)
    stack.resources_mib = GROWN_MIB
    assert stack.update_container(GROWN_MIB).code == "OK", stack.log[-1]
    seen = stack.sandbox()
    plugged = seen["plugged_mib"]
    # Kata 4 would boot this pod with 32 + 1024 MiB: the VM has at least that, in whole
    # 128 MiB blocks.
    assert (
        OVERHEAD_MEMORY_MIB + GROWN_MIB <= seen["total_mib"] < OVERHEAD_MEMORY_MIB + GROWN_MIB + 128
    )
    stack.guest_shows(plugged)
    stack.healthy()


def test_an_unsafe_decrease_is_refused_where_the_kubelet_sees_it(stack: Stack) -> None:
    """A pod-level decrease while the guest holds the memory: the CRI call fails with
    kata-mem's reason, the VM and the pod cgroup stay. Once the guest frees it, the same
    resize is OK, the VM is back at its boot size, and only then the cgroup is lowered."""
    assert stack.resources_mib == GROWN_MIB
    total = stack.sandbox()["total_mib"]
    limit = stack.cg.limit()
    stack.vm.alloc(600)
    try:
        status = stack.resize(BOOT_MIB, containers=False)
        assert status.code != "OK", status
        assert "kata-mem" in status.message and "UsageAboveTarget" in status.message, status
        assert stack.sandbox()["total_mib"] == total
        assert stack.cg.limit() == limit
        stack.healthy()
    finally:
        stack.vm.free()

    def shrunk() -> bool:
        return stack.resize(BOOT_MIB, containers=False).code == "OK"

    # The guest's statistics show the freed memory within a few seconds (one report).
    wait_until(shrunk, lambda: f"the decrease accepted: {stack.log[-3:]}", 30, interval=1)
    assert stack.sandbox()["total_mib"] == OVERHEAD_MEMORY_MIB + BOOT_MIB
    assert stack.cg.limit() == (BOOT_MIB + OVERHEAD_MIB) * MiB
    stack.guest_shows(0)
    # The container follows (its limit inside the VM): nothing left to do for kata-mem.
    assert stack.update_container(BOOT_MIB).code == "OK", stack.log[-1]
    stack.healthy()


def test_a_container_level_resize_moves_a_static_vm_both_ways(stack: Stack) -> None:
    """crictl update --memory, up and down (UpdateContainerResources alone, as before
    kubernetes PR #137555): under static sizing the VM follows the containers' total."""
    stack.cg.set_limit((GROWN_MIB + OVERHEAD_MIB) * MiB)  # room for the grow
    assert stack.update_container(GROWN_MIB).code == "OK", stack.log[-1]
    seen = stack.sandbox()
    assert seen["total_mib"] >= OVERHEAD_MEMORY_MIB + GROWN_MIB
    stack.guest_shows(seen["plugged_mib"])
    assert stack.update_container(BOOT_MIB).code == "OK", stack.log[-1]
    assert stack.sandbox()["total_mib"] == OVERHEAD_MEMORY_MIB + BOOT_MIB
    stack.guest_shows(0)
    stack.cg.set_limit((BOOT_MIB + OVERHEAD_MIB) * MiB)
    stack.healthy()


def test_a_pod_of_another_handler_is_left_alone(stack: Stack) -> None:
    """A runc pod: every NRI event is answered at once, and kata-mem never hears of it."""
    pod = stack.node.run_pod(
        "plain",
        RUNC_HANDLER,
        hierarchy_path(stack.cg.path),
        resources=resources(memory=256 * MiB),
    )
    try:
        status = stack.node.update_sandbox(pod, memory=512 * MiB, overhead=0)
        assert status.code == "OK", status
        assert not stack.plugin.lines("register", pod)
        assert not stack.plugin.lines("UpdatePodSandbox", pod)
        assert not stack.kata_mem_asked(pod)
    finally:
        stack.node.stop_pod(pod)
        stack.node.remove_pod(pod)
    stack.healthy()


def test_restarts_lose_nothing(stack: Stack) -> None:
    """The plugin killed and started again, containerd restarted with the pod running,
    kata-mem serve restarted: the plugin is synchronized and registers the pod again, the
    journal still describes the VM, and the same resize is answered the same way."""
    assert stack.resize(GROWN_MIB).code == "OK", stack.log[-1]
    total = stack.sandbox()["total_mib"]
    stack.plugin.kill()
    stack.plugin.start()
    assert len(stack.plugin.lines("register", stack.pod)) >= 2
    assert stack.update_sandbox(GROWN_MIB).code == "OK", stack.log[-1]

    synced = stack.plugin.synchronized()
    stack.node.restart()
    wait_until(
        lambda: stack.plugin.synchronized() > synced,
        lambda: f"the plugin synchronized again after containerd restarted:\n{stack.plugin.log()}",
        30,
    )
    assert stack.pod in {p["id"] for p in stack.node.pods()}
    assert stack.update_sandbox(GROWN_MIB).code == "OK", stack.log[-1]

    stack.service.stop()
    down = stack.update_sandbox(BOOT_MIB)
    assert down.code != "OK" and "cannot be asked" in down.message, down
    stack.service = start(stack.service.socket.parent, "--config", str(stack.config))
    assert stack.update_sandbox(GROWN_MIB).code == "OK", stack.log[-1]
    assert stack.sandbox()["total_mib"] == total
    journal = stack.sandbox()["journal"]
    assert journal is not None and journal["state"] == "idle", journal
    stack.healthy()


def test_a_shrink_longer_than_nris_timeout_is_answered_in_time(stack: Stack) -> None:
    """NRI drops a plugin that overruns its request timeout and lets the call through:
    the plugin answers within its share of it (Unavailable, kata-mem still at work), serve
    finishes the shrink, and the kubelet's retry gets OK. Here containerd's timeout is
    lowered to 100 ms, shorter than the two verified DIMM unplugs of this shrink."""
    assert stack.resources_mib == GROWN_MIB
    stack.node.request_timeout = 0.1
    stack.node.config_path.write_text(stack.node.config())
    synced = stack.plugin.synchronized()
    stack.node.restart()
    wait_until(lambda: stack.plugin.synchronized() > synced, stack.plugin.log, 30)
    try:
        status = stack.resize(BOOT_MIB, containers=False)
        # A plugin that overran would have been dropped, and the call answered OK.
        assert status.code != "OK", status
        assert "did not answer within 75ms (NRI allows 100ms)" in status.message, status
        # The plugin was not dropped: it still answers the next call itself.
        wait_until(
            lambda: stack.sandbox()["total_mib"] == OVERHEAD_MEMORY_MIB + BOOT_MIB,
            lambda: f"serve finished the shrink: {stack.sandbox()}",
            60,
        )
        status = stack.resize(BOOT_MIB, containers=False)
        assert status.code == "OK", status
        assert stack.plugin.lines("UpdatePodSandbox", stack.pod)[-1].find("code=OK") > 0
    finally:
        stack.node.request_timeout = 2.0
        stack.node.config_path.write_text(stack.node.config())
        synced = stack.plugin.synchronized()
        stack.node.restart()
        wait_until(lambda: stack.plugin.synchronized() > synced, stack.plugin.log, 30)
    stack.guest_shows(0)
    stack.healthy()


def test_a_vm_whose_monitor_kata_holds_is_refused_not_resized(stack: Stack) -> None:
    """runtime-rs's shim keeps its VM's only QMP connection for the VM's life (qemu/inner.rs)
    and QEMU serves one QMP client at a time: while another client holds the monitor,
    kata-mem cannot reach the VM, and the resize is refused (the kubelet leaves the cgroup
    alone and retries) rather than let the cgroup move under a VM that cannot follow. Once
    the monitor is free, the retry resizes."""
    assert stack.resources_mib == BOOT_MIB
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    holder.connect(str(stack.vm.qmp_socket))
    try:
        holder.settimeout(10)
        assert b'"QMP"' in holder.recv(4096)  # the holder has the greeting: it is QEMU's client
        status = stack.resize(GROWN_MIB)
        assert status.code != "OK", status
        assert stack.cg.limit() == (BOOT_MIB + OVERHEAD_MIB) * MiB
        wait_until(
            lambda: "another client may hold the monitor" in stack.service.log.read_text(),
            lambda: f"serve's reason in its log:\n{stack.service.log.read_text()[-2000:]}",
            20,
        )
    finally:
        holder.close()
    wait_until(
        lambda: stack.resize(GROWN_MIB).code == "OK",
        lambda: f"the resize once the monitor is free: {stack.log[-3:]}",
        30,
        interval=1,
    )
    stack.guest_shows(stack.sandbox()["plugged_mib"])
    assert stack.resize(BOOT_MIB).code == "OK", stack.log[-1]
    stack.guest_shows(0)
    stack.healthy()


def test_removal_forgets_the_sandbox(stack: Stack) -> None:
    """A pod goes: Kata stops its VM (at StopPodSandbox) and kata-mem forgets the
    sandbox. containerd forgets which pods NRI has seen when it restarts
    (internal/nri/nri.go needsRemoval, in memory only): this pod's stop and removal reach
    no plugin after test_restarts_lose_nothing, so it is serve's loop that forgets it, once
    the VM is gone. A pod made after the restart gets its RemovePodSandbox, and kata-mem is
    asked to forget it."""
    state = stack.service.state / stack.pod
    assert state.exists()
    stack.vm.stop()  # what Kata's shim does to the VM at StopPodSandbox
    stack.node.stop_pod(stack.pod)
    stack.node.remove_pod(stack.pod)
    wait_until(lambda: not state.exists(), lambda: f"{state} removed by serve's loop", 30)
    assert stack.service.request("GET", f"/v1/sandboxes/{stack.pod}").status == 404
    assert not stack.plugin.lines("RemovePodSandbox", stack.pod)

    later = stack.node.run_pod(
        "later",
        KATA_HANDLER,
        hierarchy_path(stack.cg.path),
        resources=resources(memory=BOOT_MIB * MiB),
    )
    assert stack.plugin.lines("register", later)
    stack.node.stop_pod(later)
    stack.node.remove_pod(later)
    assert len(stack.plugin.lines("RemovePodSandbox", later)) == 1
    assert f"sandbox {later}: delete (delete)" in stack.service.log.read_text()
