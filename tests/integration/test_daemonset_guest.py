"""kata-mem run as ``deploy/kubernetes/daemonset.yaml`` runs it (tests/support/daemonset.py:
its own cgroup and mount namespaces, the cgroup tree and /run/vc read-only, the state
directory writable, every capability dropped, no new privileges, the host's pids), against a
real guest whose QEMU runs in a real memory cgroup: the pod cgroup, limited to 1280 MiB.

In its own cgroup namespace kata-mem reads QEMU's cgroup as ``/../kata-mem-pod...``-style
paths; before the namespace-relative resolution it found no limit there and let the VM grow
to 2560 MiB, and the host OOM-killed QEMU once the guest used it (oom_kill 1). Now the
guard clamps exactly as on the host, through ``apply``, ``POST /v1/shim`` and the service's
pending-grow loop, and a deployment that cannot see the cgroup says so and holds the grow.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import kata_mem_process
from tests.support.configs import GUEST_KERNEL_PARAMS, write_config
from tests.support.daemonset import Container, Pod
from tests.support.guestvm import GuestSpec
from tests.support.memcg import CgroupGuestVM, CgroupUnavailable, MemoryCgroup
from tests.support.paths import REPO
from tests.support.service import UnixHTTPConnection, wait_ready
from tests.support.waits import wait_until

pytestmark = pytest.mark.guest
MiB, KiB_PER_MiB = 1 << 20, 1024
LIMIT_MIB = 1280
#: The manifest's paths (deploy/kubernetes/daemonset.yaml).
KATA_DIR = "/opt/kata/share/defaults/kata-containers"
CONFIG_IN_POD = f"{KATA_DIR}/configuration-qemu.toml"
QMP_IN_POD = "/run/vc/vm/sb/qmp.sock"
HOST_ARGS = ("--host-memory", "16Gi", "--host-cpus", "4", "--host-arch", "amd64")


@dataclass
class Node:
    """This machine as a Kata node: the guest in its pod cgroup, Kata's configuration
    with the ConfigMap's drop-in installed (as the init container does), and the host
    directories the DaemonSet's hostPath volumes name."""

    vm: CgroupGuestVM
    pod_cgroup: MemoryCgroup
    kata: Path
    state: Path
    vc: Path

    def host_paths(self, **more: str) -> dict[str, str]:
        return {
            "/run/kata-mem": str(self.state),
            "/run/vc": str(self.vc),
            KATA_DIR: str(self.kata),
            f"{KATA_DIR}/config.d": str(self.kata / "config.d"),
            **more,
        }

    def start_pod(self, tmp_path: Path, **more: str) -> Pod:
        container = Container.read(self.host_paths(**more))
        # Once a second rather than every 5 s: the test waits for the loop's grow.
        pod = Pod.start(container, tmp_path / "serve.log", extra_args=("--reconcile-interval", "1"))
        wait_ready(self.state / "kata-mem.sock", _proc(pod), pod.log, timeout=60)
        return pod


def _proc(pod: Pod) -> Any:
    assert pod.proc is not None
    return pod.proc


def _drop_in() -> str:
    """The ConfigMap's [kata_mem] drop-in, as deploy/kubernetes/configmap.yaml ships it."""
    doc = yaml.safe_load((REPO / "deploy" / "kubernetes" / "configmap.yaml").read_text())
    text: str = doc["data"]["50-kata-mem.toml"]
    return text


@pytest.fixture
def node(guest_dir: Path, tmp_path: Path) -> Iterator[Node]:
    try:
        pod_cgroup = MemoryCgroup.create("kata-mem-qemu-pod")
    except CgroupUnavailable as exc:
        pytest.skip(f"no memory cgroup for QEMU: {exc}")
    pod_cgroup.set_limit(LIMIT_MIB * MiB)
    kata = tmp_path / "kata"
    (kata / "config.d").mkdir(parents=True)
    write_config(
        kata / "configuration-qemu.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "memory_slots": 8,
            "enable_virtio_mem": True,
            "kernel_params": GUEST_KERNEL_PARAMS,
        },
    )
    (kata / "config.d" / "50-kata-mem.toml").write_text(_drop_in())
    # TCG's translation buffer (docs, "Host-side guards": 128 MiB on TCG), a later drop-in.
    (kata / "config.d" / "60-tcg.toml").write_text("[kata_mem]\nvmm_overhead_mib = 128\n")
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    # Kata's /run/vc/vm/ID/qmp.sock; short, for sun_path.
    vc = Path(tempfile.mkdtemp(prefix="kmvc-"))
    vm = CgroupGuestVM(
        guest_dir, vc / "vm" / "sb", GuestSpec(virtio_mem_mib=3072), cgroup=pod_cgroup
    )
    try:
        vm.start()
        yield Node(vm, pod_cgroup, kata, state, vc)
    finally:
        vm.stop()
        pod_cgroup.remove()
        shutil.rmtree(vc, ignore_errors=True)


def _apply_json(result: Any) -> dict[str, Any]:
    assert result.stdout.strip(), result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def _get(state: Path, path: str) -> tuple[int, Any]:
    conn = UnixHTTPConnection(str(state / "kata-mem.sock"), 30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    return resp.status, (json.loads(body) if path != "/metrics" else body.decode())


def _post(state: Path, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    conn = UnixHTTPConnection(str(state / "kata-mem.sock"), 300)
    try:
        conn.request("POST", "/v1/shim", body=json.dumps(doc).encode())
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _shim_request(limit_mib: int) -> dict[str, Any]:
    """What Kata's shim sends for the sandbox: the pod's paths, one container."""
    return {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb",
        "event": "update",
        "config": CONFIG_IN_POD,
        "containers": [{"id": "c1", "state": "running", "memory_limit_bytes": limit_mib * MiB}],
        "backend": {"type": "qmp", "socket": QMP_IN_POD},
        "apply": True,
        "allow_shrink": False,
        "host": {"memory_bytes": 16 << 30, "cpus": 4},
    }


def test_apply_in_the_pod_clamps_exactly_as_on_the_host_and_qemu_lives(
    node: Node, tmp_path: Path
) -> None:
    # On the host: what the guard decides (a dry run changes nothing).
    on_host = _apply_json(
        kata_mem_process(
            "apply",
            "--config",
            str(node.kata / "configuration-qemu.toml"),
            "--qmp",
            str(node.vm.qmp_socket),
            "--sandbox",
            "sb",
            "--limit",
            "2Gi",
            *HOST_ARGS,
            "--json",
            "--dry-run",
        )
    )
    want = on_host["plan"]["memory"]
    assert "host_cgroup" in want["clamped_by"], want
    base_kb = node.vm.status().total_kb
    pod = node.start_pod(tmp_path)
    try:
        probe = pod.probe()
        assert probe.returncode == 0, probe.stderr
        assert _get(node.state, "/healthz") == (200, {"status": "ok"})
        # The manifest's metrics address, on the pod's own network (what Prometheus scrapes).
        scrape = pod.exec(["curl", "-sS", "http://127.0.0.1:9464/metrics"], timeout=60)
        assert scrape.returncode == 0 and "kata_mem_request_seconds" in scrape.stdout, scrape
        result = pod.kata_mem(
            "apply",
            "--config",
            CONFIG_IN_POD,
            "--qmp",
            QMP_IN_POD,
            "--sandbox",
            "sb",
            "--limit",
            "2Gi",
            *HOST_ARGS,
            "--json",
        )
        doc = _apply_json(result)
        m = doc["plan"]["memory"]
        assert (result.returncode, doc["status"]) == (0, "Resized"), result.stderr
        assert (m["target_mib"], m["clamped_by"]) == (want["target_mib"], want["clamped_by"])
        assert m["host_cgroup"]["path"] == want["host_cgroup"]["path"] == str(node.pod_cgroup.path)
        assert m["host_cgroup"]["limit_mib"] == LIMIT_MIB and m["host_cgroup_unseen"] is None
        grown = node.vm.wait_mem(
            lambda s: s.total_kb >= base_kb + (m["target_mib"] - 512) * KiB_PER_MiB, timeout=60
        )
        # The guest uses everything it has; QEMU stays inside its pod cgroup.
        mib = node.vm.status().avail_kb // KiB_PER_MiB - 56
        assert node.vm.alloc(mib).startswith("OK alloc")
        time.sleep(1)  # not a wait: QEMU is charged as the guest touches its pages (done)
        kills = node.pod_cgroup.oom_kills()
        print(
            f"in the pod: 2560 MiB clamped to {m['target_mib']} MiB (host: {want['target_mib']}), "
            f"guest MemTotal {grown.total_kb // KiB_PER_MiB} MiB, filled {mib} MiB, "
            f"QEMU charge {node.pod_cgroup.usage() // MiB} of {LIMIT_MIB} MiB, oom_kill {kills}"
        )
        assert node.vm.is_alive() and kills == 0
    finally:
        assert pod.stop() == 0, pod.stderr()


def test_the_shim_and_the_pending_grow_loop_in_the_pod(node: Node, tmp_path: Path) -> None:
    base_kb = node.vm.status().total_kb
    pod = node.start_pod(tmp_path)
    try:
        status, doc = _post(node.state, _shim_request(2048))
        m = doc["plan"]["memory"]
        assert (status, doc["outcome"]["status"]) == (200, "Resized"), doc
        assert m["clamped_by"][0] == "host_cgroup" and m["host_cgroup"]["limit_mib"] == LIMIT_MIB
        held = m["target_mib"]
        assert held < 2560
        # The kubelet raises the pod cgroup (after an UpdatePodSandboxResources answered):
        # the service's loop sees the new limit and grows the rest, from inside the pod.
        node.pod_cgroup.set_limit(4096 * MiB)
        grown = node.vm.wait_mem(lambda s: s.total_kb >= base_kb + 2048 * KiB_PER_MiB, timeout=120)
        print(
            f"shim: held at {held} MiB under {LIMIT_MIB}; after the limit rose, the loop "
            f"grew the guest to {grown.total_kb // KiB_PER_MiB} MiB"
        )
        assert node.vm.is_alive() and node.pod_cgroup.oom_kills() == 0
        assert _get(node.state, "/healthz") == (200, {"status": "ok"})
    finally:
        assert pod.stop() == 0, pod.stderr()


def test_a_pod_that_cannot_see_the_cgroup_says_so_and_holds_the_grow(
    node: Node, tmp_path: Path
) -> None:
    # The DaemonSet without the host's cgroup tree: an empty directory at /sys/fs/cgroup.
    empty = tmp_path / "no-cgroup"
    empty.mkdir()
    base_kb = node.vm.status().total_kb
    pod = node.start_pod(tmp_path, **{"/sys/fs/cgroup": str(empty)})
    try:
        status, doc = _post(node.state, _shim_request(2048))
        m = doc["plan"]["memory"]
        assert (status, m["target_mib"], m["clamped_by"]) == (200, 512, ["host_cgroup_unseen"])
        assert m["host_cgroup"] is None
        assert m["host_cgroup_unseen"]["reason"] == "not_reachable"
        assert any(
            w.startswith("host cgroup unseen (not_reachable): pid ") for w in doc["warnings"]
        )
        code, health = _get(node.state, "/healthz")
        assert code == 200 and health["status"] == "degraded"
        assert [(u["sandbox"], u["reason"]) for u in health["host_cgroup_unseen"]] == [
            ("sb", "not_reachable")
        ]
        probe = pod.probe()  # degraded is not dead: the pod is not restarted for it
        assert probe.returncode == 0, probe.stderr
        _, metrics = _get(node.state, "/metrics")
        assert 'kata_mem_host_cgroup_unseen_total{reason="not_reachable"} 1.0' in metrics
        assert "kata_mem_host_cgroup_unseen_sandboxes 1.0" in metrics
        assert node.vm.status().total_kb == base_kb  # nothing was plugged
        wait_until(
            lambda: "host cgroup unseen (not_reachable)" in pod.stderr(), "the log says so", 10
        )
    finally:
        assert pod.stop() == 0, pod.stderr()


def test_a_pod_limit_decrease_in_the_pod_brings_qemus_charge_under_it(
    node: Node, tmp_path: Path
) -> None:
    """KEP-1287's host-side decrease from inside the pod: an ``update-sandbox`` with a lower
    pod limit shrinks the VM safely; QEMU's charge falls under the new limit, which the
    kubelet can then write with QEMU alive."""
    node.pod_cgroup.set_limit(4096 * MiB)
    base_kb = node.vm.status().total_kb
    pod = node.start_pod(tmp_path)
    try:
        status, doc = _post(node.state, _shim_request(2048))
        assert (status, doc["outcome"]["status"]) == (200, "Resized"), doc
        node.vm.wait_mem(lambda s: s.total_kb >= base_kb + 2048 * KiB_PER_MiB, timeout=60)
        node.vm.alloc(1200)
        node.vm.free()
        charged = node.pod_cgroup.usage() // MiB
        # The pod's new resources 768 MiB + the RuntimeClass overhead 256 MiB.
        update = {
            **_shim_request(2048),
            "event": "update-sandbox",
            "containers": [],
            "sandbox_resources": {"memory_limit_bytes": 768 * MiB},
            "overhead": {"memory_limit_bytes": 256 * MiB},
            "allow_shrink": True,
        }
        status, doc = _post(node.state, update)
        m = doc["plan"]["memory"]
        assert (status, doc["outcome"]["status"], doc["cri"]["code"]) == (200, "Resized", "OK"), doc
        assert m["host_cgroup"]["path"] == str(node.pod_cgroup.path)
        after = node.pod_cgroup.usage() // MiB
        print(
            f"KEP-1287 in the pod: QEMU charged {charged} MiB, shrunk to {m['target_mib']} MiB "
            f"for a 1024 MiB pod limit, charged {after} MiB after"
        )
        assert after < 1024 <= charged
        node.pod_cgroup.set_limit(1024 * MiB)  # the kubelet's write, after the answer
        assert node.vm.is_alive() and node.vm.status().total_kb < base_kb + 512 * KiB_PER_MiB
        assert node.pod_cgroup.oom_kills() == 0
    finally:
        assert pod.stop() == 0, pod.stderr()
