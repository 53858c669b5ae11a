"""The node rig itself, on both containerd series: a real containerd with NRI and runc, pods
of a Kata-named handler, and what an NRI plugin (tests/go's nri-recorder) gets for each CRI
call the kubelet makes on an in-place resize. These are the facts kata-mem's NRI plugin is
built on; each test fails when containerd stops behaving so.

NRI's JSON (protojson) writes 64-bit integers as strings: ``limit(...)`` reads them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Optional

import psutil
import pytest

from tests.support.memcg import MemoryCgroup
from tests.support.node import (
    KATA_HANDLER,
    NRI_MODULE,
    PAUSE_IMAGE,
    Node,
    Rig,
    cgroup_roots,
    containerd_version,
    hierarchy_path,
    mounts_under,
    pinned_version,
    resources,
    running_node,
)
from tests.support.paths import REPO
from tests.support.waits import wait_until

# The first test's setup may build the rig from cold caches: minutes on 2 cores
# (scripts/build-node-rig.sh; the tests after it find it built).
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

MiB = 1 << 20
POD_MEMORY = 256 * MiB
POD_OVERHEAD = 160 * MiB  # kata-deploy's RuntimeClass podFixed
CONTAINER_MEMORY = 128 * MiB


def limit(linux_resources: Optional[dict[str, Any]]) -> Optional[int]:
    """The memory limit of an NRI LinuxResources (protojson), or None when it has none."""
    value = ((linux_resources or {}).get("memory") or {}).get("limit", {}).get("value")
    return None if value is None else int(value)


def cpu(linux_resources: dict[str, Any], field: str) -> int:
    return int(linux_resources["cpu"][field]["value"])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def memory_cgroup_of(pid: int) -> str:
    """The v1 memory cgroup (or the v2 cgroup) of ``pid``, as /proc/PID/cgroup says."""
    paths = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        hier, controllers, path = line.split(":", 2)
        paths["memory" if "memory" in controllers.split(",") else hier] = path
    return paths.get("memory", paths.get("0", ""))


def memory_limit(cgroup: MemoryCgroup, child: str) -> Optional[int]:
    """The memory limit of the child cgroup ``child`` of ``cgroup``; None when unlimited."""
    name = "memory.limit_in_bytes" if cgroup.version == 1 else "memory.max"
    text = (cgroup.path / child / name).read_text().strip()
    return None if text == "max" or int(text) >= 1 << 62 else int(text)


def run_kata_pod(node: Node, cgroup: MemoryCgroup, name: str = "pod") -> str:
    return node.run_pod(
        name,
        KATA_HANDLER,
        hierarchy_path(cgroup.path),
        annotations={"io.katacontainers.config.hypervisor.default_memory": "512"},
        resources=resources(memory=POD_MEMORY, cpu_quota=50_000, cpu_period=100_000),
        overhead=resources(memory=POD_OVERHEAD),
    )


def test_a_kata_pod_runs_in_its_cgroup_and_the_plugin_sees_it(
    node: Node, pod_cgroup: MemoryCgroup
) -> None:
    recorder = node.start_recorder()
    configure = recorder.events("Configure")[0]
    assert (configure["runtime_name"], configure["runtime_version"]) == (
        "containerd",
        node.version,
    )
    # The NRI that containerd's own go.mod requires (v2.3.7: v0.12.0, v2.4.2: v0.12.3).
    nri = pinned_version(REPO / "tests" / "rig" / f"containerd-{node.series}", NRI_MODULE)
    assert configure["runtime_nri_version"] == nri

    pod = run_kata_pod(node, pod_cgroup)
    ctr = node.create_container(pod, "app", memory_limit=CONTAINER_MEMORY)

    [listed] = [p for p in node.pods() if p["id"] == pod]
    assert (listed["state"], listed["runtimeHandler"]) == ("SANDBOX_READY", KATA_HANDLER)
    run = recorder.wait_for("RunPodSandbox", lambda e: e["pod"]["id"] == pod)["pod"]
    assert run["runtime_handler"] == KATA_HANDLER
    assert run["annotations"]["io.katacontainers.config.hypervisor.default_memory"] == "512"
    assert run["linux"]["cgroup_parent"] == hierarchy_path(pod_cgroup.path)
    assert limit(run["linux"]["pod_resources"]) == POD_MEMORY
    assert cpu(run["linux"]["pod_resources"], "quota") == 50_000
    assert limit(run["linux"]["pod_overhead"]) == POD_OVERHEAD
    created = recorder.wait_for("CreateContainer", lambda e: e["container"]["id"] == ctr)
    assert limit(created["container"]["linux"]["resources"]) == CONTAINER_MEMORY
    recorder.wait_for("PostStartContainer", lambda e: e["container"]["id"] == ctr)
    kinds = [k for k in recorder.kinds() if k not in ("Configure", "Synchronize")]
    assert kinds == [
        "RunPodSandbox",
        "CreateContainer",
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
    ]

    # runc (cgroupfs) put the pause process and the container in cgroups named by their ids
    # under the pod's cgroup_parent, which is the test's memory cgroup.
    info = node.inspect_pod(pod)["info"]
    pause_pid = int(info["pid"])
    assert memory_cgroup_of(pause_pid) == f"{hierarchy_path(pod_cgroup.path)}/{pod}"
    ctr_pid = int(node.inspect_container(ctr)["info"]["pid"])
    assert memory_cgroup_of(ctr_pid) == f"{hierarchy_path(pod_cgroup.path)}/{ctr}"
    assert memory_limit(pod_cgroup, ctr) == CONTAINER_MEMORY
    assert psutil.Process(ctr_pid).exe().endswith("/pause")
    # The pod's resources set no cgroup (that is the kubelet's pod cgroup): containerd
    # gives them to the runtime in the pause container's OCI annotations, and to NRI.
    assert memory_limit(pod_cgroup, pod) is None
    annotations = info["runtimeSpec"]["annotations"]
    assert annotations["io.kubernetes.cri.sandbox-memory"] == str(POD_MEMORY)
    assert annotations["io.kubernetes.cri.sandbox-cpu-quota"] == "50000"
    assert annotations["io.katacontainers.config.hypervisor.default_memory"] == "512"
    assert info["runtimeSpec"]["process"]["args"] == ["/pause"]
    assert info["image"] == PAUSE_IMAGE


def test_update_pod_sandbox_resources_reaches_the_plugin(
    node: Node, pod_cgroup: MemoryCgroup
) -> None:
    recorder = node.start_recorder()
    pod = run_kata_pod(node, pod_cgroup)
    node.create_container(pod, "app", memory_limit=CONTAINER_MEMORY)

    status = node.update_sandbox(pod, memory=512 * MiB, overhead=200 * MiB)

    assert (status.code, status.message) == ("OK", "")
    update = recorder.wait_for("UpdatePodSandbox", lambda e: e["pod"]["id"] == pod)
    assert limit(update["linux_resources"]) == 512 * MiB
    assert limit(update["overhead_linux_resources"]) == 200 * MiB
    # The pod NRI describes keeps its RunPodSandbox values: only this event has the new ones.
    assert limit(update["pod"]["linux"]["pod_resources"]) == POD_MEMORY
    kinds = recorder.kinds()
    # Post comes before the CRI call returns.
    assert kinds[kinds.index("UpdatePodSandbox") :] == ["UpdatePodSandbox", "PostUpdatePodSandbox"]


def test_a_plugin_refusing_the_update_fails_the_cri_call(
    node: Node, pod_cgroup: MemoryCgroup
) -> None:
    """The refusal reaches the kubelet as gRPC Unknown with the plugin's text. A plugin
    called before the refusing one (a lower index) has already had UpdatePodSandbox, and
    nobody gets PostUpdatePodSandbox: "Post" is the only sign that a resize went through."""
    earlier = node.start_recorder("earlier", idx="40")
    refusing = node.start_recorder(
        "refusing", idx="60", fail_update_sandbox="kata-mem: the guest uses 700 MiB"
    )
    pod = run_kata_pod(node, pod_cgroup)

    status = node.update_sandbox(pod, memory=64 * MiB, overhead=POD_OVERHEAD)

    assert (status.code, status.message) == (
        "Unknown",
        "NRI sandbox update failed: rpc error: code = Unknown desc = "
        "kata-mem: the guest uses 700 MiB",
    )
    assert limit(refusing.wait_for("UpdatePodSandbox")["linux_resources"]) == 64 * MiB
    assert limit(earlier.wait_for("UpdatePodSandbox")["linux_resources"]) == 64 * MiB
    assert (
        earlier.events("UpdatePodSandbox")[0]["unix_nano"]
        < (refusing.events("UpdatePodSandbox")[0]["unix_nano"])
    )
    # containerd sends PostUpdatePodSandbox before it answers, so none will come.
    assert (earlier.kinds()[-1], refusing.kinds()[-1]) == ("UpdatePodSandbox", "UpdatePodSandbox")
    # The plugin stays connected: the next resize reaches it too.
    assert node.update_sandbox(pod, memory=128 * MiB).code == "Unknown"
    refusing.wait_for("UpdatePodSandbox", lambda e: limit(e["linux_resources"]) == 128 * MiB)


def test_a_container_update_reaches_the_plugin_and_the_cgroup(
    node: Node, pod_cgroup: MemoryCgroup
) -> None:
    recorder = node.start_recorder()
    pod = run_kata_pod(node, pod_cgroup)
    ctr = node.create_container(pod, "app", memory_limit=CONTAINER_MEMORY)

    node.update_container(ctr, memory=192 * MiB)

    update = recorder.wait_for("UpdateContainer", lambda e: e["container"]["id"] == ctr)
    assert limit(update["linux_resources"]) == 192 * MiB
    assert limit(update["container"]["linux"]["resources"]) == CONTAINER_MEMORY  # before it
    recorder.wait_for("PostUpdateContainer", lambda e: e["container"]["id"] == ctr)
    assert memory_limit(pod_cgroup, ctr) == 192 * MiB


@pytest.mark.parametrize(
    "fail_request", [False, True], ids=["no failure policy", "FailurePolicy.fail_request"]
)
def test_a_plugin_slower_than_the_request_timeout_is_dropped_and_the_call_succeeds(
    rig: Rig, series: str, pod_cgroup: MemoryCgroup, fail_request: bool
) -> None:
    """The danger kata-mem's plugin must avoid: a refusal that comes too late is no refusal.
    The call succeeds, and the plugin is disconnected for good. NRI v0.12.4's failure policy
    (fail_request) would fail the call instead, but containerd v2.3.7 (NRI v0.12.0) and
    v2.4.2 (v0.12.3) do not know it."""
    with running_node(rig, series, request_timeout=1.0) as node:
        recorder = node.start_recorder(
            fail_update_sandbox="kata-mem: too late",
            update_sandbox_delay_ms=2500,
            fail_request=fail_request,
        )
        pod = run_kata_pod(node, pod_cgroup)

        status = node.update_sandbox(pod, memory=64 * MiB)

        assert (status.code, status.message) == ("OK", "")
        assert status.elapsed_ms >= 1000
        recorder.wait_for("Closed")
        ctr = node.create_container(pod, "app", memory_limit=CONTAINER_MEMORY)
        assert node.containers(pod)[0]["id"] == ctr
        assert "CreateContainer" not in recorder.kinds()


def test_pods_survive_a_containerd_restart_and_a_new_plugin_is_synchronized(
    node: Node, pod_cgroup: MemoryCgroup
) -> None:
    first = node.start_recorder("first")
    pod = run_kata_pod(node, pod_cgroup)
    ctr = node.create_container(pod, "app", memory_limit=CONTAINER_MEMORY)
    pause_pid = int(node.inspect_pod(pod)["info"]["pid"])
    assert node.update_sandbox(pod, memory=512 * MiB).code == "OK"

    node.restart()

    first.wait_for("Closed")  # containerd's NRI went away with it
    [listed] = node.pods()
    assert (listed["id"], listed["state"]) == (pod, "SANDBOX_READY")
    assert alive(pause_pid)
    assert int(node.inspect_pod(pod)["info"]["pid"]) == pause_pid
    assert [(c["id"], c["state"]) for c in node.containers(pod)] == [(ctr, "CONTAINER_RUNNING")]
    second = node.start_recorder("second")
    sync = second.events("Synchronize")[0]
    [synced] = [p for p in sync["pods"] if p["id"] == pod]
    assert synced["runtime_handler"] == KATA_HANDLER
    # Synchronize describes the pod as it was created, not as UpdatePodSandbox left it.
    assert limit(synced["linux"]["pod_resources"]) == POD_MEMORY
    [container] = [c for c in sync["containers"] if c["id"] == ctr]
    assert (container["pod_sandbox_id"], container["state"]) == (pod, "CONTAINER_RUNNING")
    # The restarted node still serves the resize call.
    assert node.update_sandbox(pod, memory=384 * MiB).code == "OK"
    second.wait_for("UpdatePodSandbox", lambda e: limit(e["linux_resources"]) == 384 * MiB)


def test_after_a_containerd_restart_plugins_get_no_pod_stop_or_removal(
    node: Node, pod_cgroup: MemoryCgroup
) -> None:
    """containerd remembers which pods NRI was told of only in memory (internal/nri's state,
    filled by RunPodSandbox): a pod that was running when containerd restarted is stopped
    and removed without StopPodSandbox or RemovePodSandbox for any plugin. Its containers'
    events still come. A plugin cannot count on RemovePodSandbox to forget a pod."""
    pod = run_kata_pod(node, pod_cgroup)
    ctr = node.create_container(pod, "app", memory_limit=CONTAINER_MEMORY)
    node.restart()
    recorder = node.start_recorder()
    assert [p["id"] for p in recorder.events("Synchronize")[0]["pods"]] == [pod]

    node.stop_pod(pod)
    node.remove_pod(pod)

    recorder.wait_for("RemoveContainer", lambda e: e["container"]["id"] == ctr)
    assert node.pods() == []
    assert recorder.kinds() == ["Configure", "Synchronize", "StopContainer", "RemoveContainer"]


def test_stop_and_removal_reach_the_plugin(node: Node, pod_cgroup: MemoryCgroup) -> None:
    recorder = node.start_recorder()
    pod = run_kata_pod(node, pod_cgroup)
    ctr = node.create_container(pod, "app", memory_limit=CONTAINER_MEMORY)
    pause_pid = int(node.inspect_pod(pod)["info"]["pid"])

    node.stop_pod(pod)
    node.remove_pod(pod)

    recorder.wait_for("RemovePodSandbox", lambda e: e["pod"]["id"] == pod)
    kinds = recorder.kinds()
    tail = kinds[kinds.index("StopContainer") :]
    assert tail == ["StopContainer", "StopPodSandbox", "RemoveContainer", "RemovePodSandbox"]
    assert node.pods() == []
    assert not alive(pause_pid)
    assert not (pod_cgroup.path / pod).exists()
    assert not (pod_cgroup.path / ctr).exists()


def test_the_harness_leaves_nothing_behind(rig: Rig, series: str, pod_cgroup: MemoryCgroup) -> None:
    run_containerd = Path("/run/containerd").exists()
    parent = hierarchy_path(pod_cgroup.path)
    absent = [r for r in cgroup_roots() if not (r / parent.lstrip("/")).exists()]
    assert absent, "the test's cgroup_parent exists only in the memory hierarchy"
    with running_node(rig, series) as node:
        node.start_recorder()
        pod = run_kata_pod(node, pod_cgroup)
        ctr = node.create_container(pod, "app", memory_limit=CONTAINER_MEMORY)
        pids = [p.pid for p in node.processes()]
        directory = node.dir
        assert len(pids) >= 5  # containerd, the recorder, a shim, pause twice
        assert mounts_under(directory)  # the two rootfs overlays, the pod's /dev/shm
        assert any((r / parent.lstrip("/")).exists() for r in absent)  # runc made them

    wait_until(lambda: not any(alive(p) for p in pids), "every process gone")
    assert mounts_under(directory) == []
    assert not directory.exists()
    for root in cgroup_roots():
        for cid in (pod, ctr):
            assert not (root / parent.lstrip("/") / cid).exists()
    assert [r for r in absent if (r / parent.lstrip("/")).exists()] == []
    assert Path("/run/containerd").exists() == run_containerd


def test_the_pinned_versions_are_the_ones_built(rig: Rig, series: str) -> None:
    out = subprocess.run(
        [str(rig.containerd_bin(series) / "containerd"), "--version"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split()[:3] == [
        "containerd",
        "github.com/containerd/containerd/v2",
        containerd_version(series),
    ]
