"""The operator's path from an empty node to a running DaemonSet, with the image built here:
kata-mem's image (scripts/build_image.py: Debian 12 packages, the wheel, the plugin; no
container engine) imported into a real containerd with NRI (tests/support/node.py), and
deploy/kubernetes/daemonset.yaml's pod run there as the kubelet runs it, its image as
kustomize names it (tests/support/daemonset_cri.py: the pod spec turned into CRI calls).
Then what an operator checks: the init container installed the drop-in and exited 0,
serve answers the DaemonSet's own probe and ``/healthz``, the containers run with the
securityContext written, the plugin registered with the node's NRI and hears a Kata pod's
RunPodSandbox, serve stops cleanly on SIGTERM, and the uninstall DaemonSet, on the same
image, takes the drop-in away.

Kata's directory on the node is kata-deploy 3.29's: ``runtimes/qemu/`` holds Kata's own
QEMU configuration of the Go runtime (tests/fixtures/kata-configs, as Kata installs it) and
its ``config.d``, the top-level file is a link to it. The node's own drop-in there sizes
VMs as the test guest boots (:data:`NODE_DROP_IN`), and the last test resizes a Kata pod
whose VM is that guest, its monitor where Kata's Go runtime puts its extra QMP monitor,
``/run/vc/vm/ID/extra-monitor.sock``: through the DaemonSet's plugin and serve, as the
manifest runs them, and no flag of theirs changed.
Not as on a cluster: the pod shares the node's network namespace (the rig has no CNI), so
serve's metrics listen on a free loopback port instead of the manifest's ``0.0.0.0:9464``
(on this shared machine that would be every address, and one port for every run).

One node (containerd v2.3, the oldest the plugin supports) for the module; the tests run
in order on it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemonset_cri import (
    DEPLOY,
    DaemonSetPod,
    config_map_data,
    kustomized_image,
)
from tests.support.guestvm import GuestSpec
from tests.support.memcg import CgroupGuestVM, CgroupUnavailable, MemoryCgroup
from tests.support.node import (
    KATA_GO_HANDLER,
    Node,
    Rig,
    hierarchy_path,
    resources,
    running_node,
)
from tests.support.oci_image import image_ref, read_blob, read_index
from tests.support.paths import KATA_CONFIGS, REPO
from tests.support.service import UnixHTTPConnection
from tests.support.waits import wait_until

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

# The first test's setup may build the rig and the image from cold caches.
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]

SERIES = "v2.3"
KATA_DIR = "/opt/kata/share/defaults/kata-containers"
DROP_IN = "runtimes/qemu/config.d/50-kata-mem.toml"
MiB = 1 << 20
#: The test guest's boot memory, DIMM slots and maxmem, as Kata would boot it with this
#: node's settings; its kernel onlines hot-added memory movable, as the guest does.
BOOT_MIB, SLOTS, MAXMEM_MIB = 512, 8, 4096
NODE_DROP_IN = f"""\
[hypervisor.qemu]
default_memory = {BOOT_MIB}
memory_slots = {SLOTS}
default_maxmemory = {MAXMEM_MIB}
kernel_params = "memhp_default_state=online_movable"
# The Go runtime's second QMP monitor, the one kata-mem uses (docs/guide/in-place-resize.md).
enable_debug = true
extra_monitor_socket = "qmp"
"""
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@dataclass
class Deployed:
    node: Node
    pod: DaemonSetPod
    cgroup: MemoryCgroup
    tar: Path
    #: this machine's directories for Kata's configuration, /run/kata-mem and /run/vc
    kata: Path
    state: Path
    vc: Path
    metrics: str
    where: Path


def kata_deploy_node(kata: Path) -> None:
    """Kata's directory as kata-deploy 3.29 leaves it for the Go runtime's QEMU: the
    configuration in runtimes/qemu/ beside its config.d, the top-level file a link to it;
    and the node's drop-in."""
    own = kata / "runtimes" / "qemu"
    (own / "config.d").mkdir(parents=True)
    shutil.copy(KATA_CONFIGS / "configuration-qemu.toml", own / "configuration-qemu.toml")
    (own / "config.d" / "10-node.toml").write_text(NODE_DROP_IN)
    (kata / "configuration-qemu.toml").symlink_to("runtimes/qemu/configuration-qemu.toml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def deployed(rig: Rig, kata_mem_image: Path, tmp_path_factory: Any) -> Iterator[Deployed]:
    where: Path = tmp_path_factory.mktemp("daemonset")
    kata = where / "kata-containers"
    kata_deploy_node(kata)
    state = where / "run-kata-mem"
    metrics = f"127.0.0.1:{free_port()}"
    try:
        cgroup = MemoryCgroup.create("kmds")
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    # /run/vc: short, for QEMU's socket path in it (a unix socket's is at most 107 bytes).
    vc = Path(tempfile.mkdtemp(prefix="kmvc-", dir="/tmp"))
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, vc, ignore_errors=True)
        cleanup.enter_context(cgroup)
        node = cleanup.enter_context(running_node(rig, SERIES))
        ref = image_ref(kata_mem_image)
        node.import_image(kata_mem_image, ref)
        pod = DaemonSetPod(
            node,
            DEPLOY / "daemonset.yaml",
            {
                KATA_DIR: kata,
                "/run/kata-mem": state,
                "/run/vc": vc,
                "/var/run/nri": node.nri_socket.parent,
            },
            where / "pod",
            replace_args={
                "kata-mem": {"--metrics-address=0.0.0.0:9464": f"--metrics-address={metrics}"}
            },
        )
        # The DaemonSet, kustomized, names the image built here, and nothing else.
        assert pod.images() == {ref}, (pod.images(), ref)
        pod.run(hierarchy_path(cgroup.path))
        yield Deployed(node, pod, cgroup, kata_mem_image, kata, state, vc, metrics, where)


def test_the_image_is_the_wheel_s_version_and_the_containerfile_s(deployed: Deployed) -> None:
    """The tag is pyproject's version, the kustomization's newTag; the image starts
    ``kata-mem serve`` (the Containerfile's ENTRYPOINT and CMD) on the Containerfile's
    Python, and its kata-mem says that version."""
    ref = image_ref(deployed.tar)
    assert ref.rsplit(":", 1)[1] == VERSION
    assert kustomized_image(f"registry.example/kata-mem:{VERSION}") == ref
    (manifest_entry,) = read_index(deployed.tar)["manifests"]
    manifest = json.loads(read_blob(deployed.tar, manifest_entry["digest"]))
    config = json.loads(read_blob(deployed.tar, manifest["config"]["digest"]))["config"]
    containerfile = (DEPLOY / "Containerfile").read_text()
    assert 'ENTRYPOINT ["kata-mem"]' in containerfile and 'CMD ["serve"]' in containerfile
    assert (config["Entrypoint"], config["Cmd"]) == (["kata-mem"], ["serve"])
    assert config["Labels"]["org.opencontainers.image.version"] == VERSION
    # serve's container gives no command: it runs the image's entrypoint with its args.
    assert deployed.pod.status("kata-mem")["state"] == "CONTAINER_RUNNING"
    said = deployed.pod.exec("kata-mem", ["kata-mem", "--version"])
    assert said.returncode == 0 and said.stdout.strip() == f"kata-mem, version {VERSION}", said
    python = re.search(r"^FROM \S+/python:(\d+\.\d+)-", containerfile, re.M)
    assert python is not None
    got = deployed.pod.exec(
        "kata-mem", ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    )
    assert got.stdout.strip() == python.group(1), got
    nri = deployed.pod.exec("kata-mem-nri", ["sh", "-c", "command -v kata-mem-nri"])
    assert nri.stdout.strip() == "/usr/local/bin/kata-mem-nri", nri


def test_the_init_container_installed_the_drop_in_and_exited_0(deployed: Deployed) -> None:
    """Into the config.d the configuration is read with (beside the file the link leads
    to), root's, mode 0644, the ConfigMap's text; nothing beside the link."""
    status = deployed.pod.status("install-drop-in")
    assert (status["state"], status["exitCode"]) == ("CONTAINER_EXITED", 0)
    drop_in = deployed.kata / DROP_IN
    assert drop_in.read_text() == config_map_data("kata-mem")["50-kata-mem.toml"]
    st = drop_in.stat()
    assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o644)
    assert not (deployed.kata / "config.d").exists()
    log = deployed.pod.logs("install-drop-in")
    assert (
        f"installed {KATA_DIR}/{DROP_IN} (read with {KATA_DIR}/configuration-qemu.toml)" in log
    ), log


def healthz(sock: Path) -> tuple[int, bytes]:
    conn = UnixHTTPConnection(str(sock), 10)
    try:
        conn.request("GET", "/healthz")
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


def test_serve_answers_the_daemonset_s_probe_and_healthz(deployed: Deployed) -> None:
    """The readiness probe, exec'd in serve's container as the kubelet does, passes once
    serve listens; ``/healthz`` on the socket the host's shims reach says ok; the metrics
    address serves /metrics."""
    wait_until(
        lambda: deployed.pod.probe("kata-mem", "readinessProbe").returncode == 0,
        lambda: f"serve ready: {deployed.pod.probe('kata-mem')}\n{deployed.pod.logs('kata-mem')}",
        60,
        interval=0.5,
    )
    live = deployed.pod.probe("kata-mem", "livenessProbe")
    assert live.returncode == 0, live
    sock = deployed.state / "kata-mem.sock"
    assert healthz(sock) == (200, b'{"status": "ok"}\n')
    with urllib.request.urlopen(f"http://{deployed.metrics}/metrics", timeout=10) as got:
        assert got.status == 200
        assert b"kata_mem_" in got.read()


def status_fields(text: str) -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def test_the_containers_run_with_the_security_context_written(deployed: Deployed) -> None:
    """Root with no capability at all, no new privileges, the runtime's seccomp filter, a
    read-only root and read-only Kata configuration, the host's PID namespace."""
    for name in ("kata-mem", "kata-mem-nri"):
        got = deployed.pod.exec(name, ["cat", "/proc/self/status"])
        assert got.returncode == 0, got
        fields = status_fields(got.stdout)
        assert fields["Uid"].split()[0] == "0" and fields["Gid"].split()[0] == "0", fields
        for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(fields[caps], 16) == 0, (name, caps, fields[caps])
        assert fields["NoNewPrivs"] == "1", fields
        assert fields["Seccomp"] == "2", fields  # SECCOMP_MODE_FILTER
        wrote = deployed.pod.exec(name, ["sh", "-c", "echo x > /written-by-the-test"])
        assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr, wrote
    wrote = deployed.pod.exec("kata-mem", ["sh", "-c", f"echo x > {KATA_DIR}/x"])
    assert wrote.returncode != 0 and "Read-only file system" in wrote.stderr, wrote
    init = deployed.pod.exec("kata-mem", ["cat", "/proc/1/comm"])
    assert init.stdout.strip() == Path("/proc/1/comm").read_text().strip(), init


def test_the_plugin_registered_and_hears_a_kata_pod(deployed: Deployed) -> None:
    """The plugin container connected to the node's NRI socket (synchronized), and a pod of
    the Kata handler it is given reaches it at RunPodSandbox: it asks serve, in the
    container beside it, how Kata sizes that pod (Kata's own QEMU configuration: the Go
    runtime, sized as containers come)."""
    wait_until(
        lambda: "msg=synchronized" in deployed.pod.logs("kata-mem-nri"),
        lambda: f"the plugin synchronized:\n{deployed.pod.logs('kata-mem-nri')}",
        30,
    )
    node = deployed.node
    pod = node.run_pod("kata", KATA_GO_HANDLER, hierarchy_path(deployed.cgroup.path))

    def registered() -> list[str]:
        return [
            line
            for line in deployed.pod.logs("kata-mem-nri").splitlines()
            if "msg=register " in line + " " and f"pod={pod}" in line
        ]

    (line,) = wait_until(
        registered, lambda: f"register of {pod}:\n{deployed.pod.logs('kata-mem-nri')}", 30
    )
    assert "runtime=go" in line and "static=false" in line, line
    node.stop_pod(pod)
    node.remove_pod(pod)


def sandbox(deployed: Deployed, pod: str) -> dict[str, Any]:
    """serve's view of the pod's VM (GET /v1/sandboxes/ID on its socket: the hypervisor
    asked now), as an operator's ``kubectl exec ... curl`` would show it."""
    conn = UnixHTTPConnection(str(deployed.state / "kata-mem.sock"), 30)
    try:
        conn.request("GET", f"/v1/sandboxes/{pod}")
        answer = conn.getresponse()
        body = answer.read()
    finally:
        conn.close()
    assert answer.status == 200, body
    doc: dict[str, Any] = json.loads(body)
    return doc


@pytest.mark.guest
def test_a_kata_pod_is_resized_through_the_daemonset_s_containers(
    deployed: Deployed, guest_dir: Path
) -> None:
    """A Kata pod whose VM is the test guest, in the pod's cgroup, its monitor at the Go
    runtime's extra-monitor path under /run/vc: the kubelet's UpdatePodSandboxResources
    for a larger pod reaches serve through the plugin container, serve (in its own
    container, the host's PIDs, the cgroup tree read-only) grows the VM, and the guest's
    own MemTotal shows it; QEMU lives and is never OOM-killed."""
    overhead = 320 * MiB  # a RuntimeClass podFixed that covers TCG's QEMU
    grown = 1024 * MiB
    try:
        vm_cgroup = MemoryCgroup.create("kmdsvm")
    except CgroupUnavailable as exc:
        pytest.skip(str(exc))
    node = deployed.node
    with vm_cgroup:
        # The kubelet raises the pod cgroup after an increase's call; here first, so that
        # the whole grow is done in the call.
        vm_cgroup.set_limit(grown + overhead)
        pod = node.run_pod(
            "vm",
            KATA_GO_HANDLER,
            hierarchy_path(vm_cgroup.path),
            resources=resources(memory=(BOOT_MIB - 128) * MiB),
            overhead=resources(memory=overhead),
        )
        # Kata's Go runtime keeps the VM's sockets in /run/vc/vm/ID (VMStorePath).
        workdir = deployed.vc / "vm" / pod
        workdir.mkdir(parents=True, mode=0o750)
        spec = GuestSpec(base_mib=BOOT_MIB, slots=SLOTS, maxmem_mib=MAXMEM_MIB, virtio_mem_mib=0)
        vm = CgroupGuestVM(guest_dir, workdir, spec, cgroup=vm_cgroup).start()
        try:
            assert vm.qmp_socket == workdir / "qmp.sock"
            # QEMU's monitor, at the name of the Go runtime's extra one (the same socket).
            os.link(vm.qmp_socket, workdir / "extra-monitor.sock")
            boot_kb = vm.status().total_kb
            status = node.update_sandbox(pod, memory=grown, overhead=overhead, timeout=30)
            assert status.code == "OK", (status, deployed.pod.logs("kata-mem-nri")[-3000:])
            seen = sandbox(deployed, pod)
            assert seen["plugged_mib"] > 0, seen
            # serve found QEMU's cgroup (SO_PEERCRED's pid in the host's PID namespace, its
            # limit in the cgroup tree the DaemonSet mounts) and grew the VM within it.
            outcome = seen["journal"]["last_outcome"]
            assert outcome["status"] == "Resized", outcome
            assert str(hierarchy_path(vm_cgroup.path)) in outcome["message"], outcome
            vm.wait_mem(lambda m: m.total_kb == boot_kb + seen["plugged_mib"] * 1024, timeout=30)
            assert vm.is_alive() and vm_cgroup.oom_kills() == 0
            updates = [
                line
                for line in deployed.pod.logs("kata-mem-nri").splitlines()
                if "msg=UpdatePodSandbox" in line and f"pod={pod}" in line
            ]
            assert updates, deployed.pod.logs("kata-mem-nri")[-3000:]
        finally:
            vm.stop()
            node.stop_pod(pod)
            node.remove_pod(pod)


def test_serve_stops_on_sigterm_within_the_grace_period(deployed: Deployed) -> None:
    """StopContainer with the pod's terminationGracePeriodSeconds: serve exits 0 on the
    SIGTERM, long before the SIGKILL."""
    status = deployed.pod.stop("kata-mem")
    assert (status["state"], status["exitCode"]) == ("CONTAINER_EXITED", 0), status
    assert status["reason"] == "Completed", status


def test_the_uninstall_daemonset_on_the_same_image_removes_the_drop_in(
    deployed: Deployed,
) -> None:
    """``kubectl delete -k deploy/kubernetes/``, then ``kubectl apply -k .../uninstall/``:
    its init container (find, grep, sh: on the same image) removes the drop-in and its
    idle container runs."""
    deployed.pod.remove()
    uninstall = DaemonSetPod(
        deployed.node,
        DEPLOY / "uninstall" / "daemonset.yaml",
        {KATA_DIR: deployed.kata},
        deployed.where / "uninstall",
    )
    assert uninstall.images() == {image_ref(deployed.tar)}
    uninstall.run(hierarchy_path(deployed.cgroup.path))
    assert not (deployed.kata / DROP_IN).exists()
    (init,) = uninstall.spec["initContainers"]
    assert f"removed {KATA_DIR}/{DROP_IN}" in uninstall.logs(init["name"])
    (idle,) = uninstall.spec["containers"]
    assert uninstall.status(idle["name"])["state"] == "CONTAINER_RUNNING"
    uninstall.remove()
    # The node's own drop-in stays.
    assert os.listdir(deployed.kata / "runtimes" / "qemu" / "config.d") == ["10-node.toml"]
