"""In-place resize of Kata pods, end to end, with nothing patched: a real containerd
(tests/support/node.py: v2.3 and v2.4, built from their modules) hands the kubelet's CRI
calls to NRI, the NRI plugin kata-mem-nri (go/) carries them to a real ``kata-mem serve``,
and serve resizes a real TCG guest that stands for the pod's Kata VM.

The stand-in (tests/support/kata_pod.py) is faithful where kata-mem looks: the guest's QEMU
runs in the pod's cgroup with the boot memory Kata 4's runtime-rs gives the pod, and its QMP
monitor is where the plugin looks for that sandbox's.

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

import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.kata_pod import (
    BOOT_MIB,
    GROWN_MIB,
    OVERHEAD_MEMORY_MIB,
    OVERHEAD_MIB,
    MiB,
    Stack,
    kata_pod,
)
from tests.support.memcg import CgroupUnavailable
from tests.support.node import (
    KATA_HANDLER,
    RUNC_HANDLER,
    SERIES,
    CriStatus,
    Rig,
    hierarchy_path,
    resources,
)
from tests.support.nri_plugin import plugin_missing
from tests.support.service import start
from tests.support.waits import wait_until

pytestmark = [pytest.mark.node, pytest.mark.guest]


@pytest.fixture(scope="module", params=SERIES)
def stack(
    request: pytest.FixtureRequest, rig: Rig, guest_dir: Path, tmp_path_factory: Any
) -> Iterator[Stack]:
    missing = plugin_missing()
    if missing:
        pytest.fail(missing)
    where: Path = tmp_path_factory.mktemp(f"nri-{request.param}")
    try:
        with kata_pod(rig, guest_dir, request.param, where) as made:
            yield made
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))


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


def waiting_at(listener: Path) -> int:
    """How many connections wait to be accepted at the unix socket ``listener``: the
    Recv-Q ss(8) shows for a listening socket."""
    out = subprocess.run(["ss", "-xlnH"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[4] == str(listener):
            return int(fields[2])
    raise AssertionError(f"nothing listens at {listener}:\n{out}")


def test_the_plugin_killed_during_a_decrease(stack: Stack) -> None:
    """The plugin killed while kata-mem works on a decrease: containerd sees its connection
    close and lets the call through, OK, as for any plugin that fails (NRI v0.12.0 and
    v0.12.3 close it and go on: the hazard docs/guide/in-place-resize.md names), and the
    kubelet writes the lower limit. serve carries the shrink to its end, QEMU survives (this
    guest holds nothing), the restarted plugin registers the pod again, and the kubelet's
    retry is answered from the VM as it is: OK, nothing left to do. The monitor is held
    meanwhile, so that the call is surely in kata-mem when the plugin dies."""
    assert stack.resources_mib == GROWN_MIB
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    holder.connect(str(stack.vm.qmp_socket))
    answered: list[CriStatus] = []
    call = threading.Thread(target=lambda: answered.append(stack.update_sandbox(BOOT_MIB)))
    try:
        holder.settimeout(10)
        assert b'"QMP"' in holder.recv(4096)
        call.start()
        wait_until(
            lambda: waiting_at(stack.vm.qmp_socket) == 1,
            "serve's connection to the VM's monitor, waiting behind the holder",
            20,
        )
        stack.plugin.kill()
        call.join(30)
        (status,) = answered
        assert status.code == "OK", status  # what NRI does with a plugin that died
        stack.cg.set_limit((BOOT_MIB + OVERHEAD_MIB) * MiB)  # the kubelet goes on
        stack.resources_mib = BOOT_MIB
    finally:
        holder.close()
        call.join(30)
    wait_until(
        lambda: stack.sandbox()["total_mib"] == OVERHEAD_MEMORY_MIB + BOOT_MIB,
        lambda: f"serve finished the shrink: {stack.service.log.read_text()[-1500:]}",
        30,
    )
    stack.guest_shows(0)
    stack.plugin.start()
    assert stack.update_sandbox(BOOT_MIB).code == "OK", stack.log[-1]
    stack.healthy()


def test_a_shrink_longer_than_nris_timeout_is_answered_in_time(stack: Stack) -> None:
    """NRI drops a plugin that overruns its request timeout and lets the call through: the
    plugin answers within its share of it (kata-mem still at work: an error, so the kubelet
    leaves the cgroup alone), serve carries the shrink to its end, and the kubelet's retry
    gets OK. Here the VM's monitor is held for longer than NRI's 2 s, so that kata-mem
    cannot be done in time whatever the machine's speed; then it is let go."""
    assert stack.resources_mib == BOOT_MIB
    assert stack.resize(GROWN_MIB).code == "OK", stack.log[-1]
    limit = stack.cg.limit()
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    holder.connect(str(stack.vm.qmp_socket))
    try:
        holder.settimeout(10)
        assert b'"QMP"' in holder.recv(4096)
        status = stack.resize(BOOT_MIB, containers=False)
    finally:
        holder.close()
    # A plugin that overran would have been dropped, and the call answered OK.
    assert status.code != "OK", status
    assert "did not answer within 1.5s (NRI allows 2s)" in status.message, status
    assert status.elapsed_ms < 2000, status
    assert stack.cg.limit() == limit
    wait_until(
        lambda: stack.sandbox()["total_mib"] == OVERHEAD_MEMORY_MIB + BOOT_MIB,
        lambda: f"serve carried the shrink on: {stack.service.log.read_text()[-1500:]}",
        30,
    )
    stack.guest_shows(0)
    # The retry: the plugin was not dropped, and answers from kata-mem.
    assert stack.resize(BOOT_MIB, containers=False).code == "OK", stack.log[-1]
    assert stack.plugin.lines("UpdatePodSandbox", stack.pod)[-1].find("code=OK") > 0
    assert stack.cg.limit() == (BOOT_MIB + OVERHEAD_MIB) * MiB
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
