"""A Kata pod on a real node, for the end-to-end NRI tests and their benchmark: containerd
(tests/support/node.py) with kata-mem's NRI plugin (tests/support/nri_plugin.py) and a real
``kata-mem serve`` (tests/support/service.py), one pod of the Kata handler, and a TCG guest
standing for the pod's VM.

The stand-in is faithful where kata-mem looks: the guest's QEMU runs in the pod's cgroup
(the pod's ``cgroup_parent``, a real v1 memory cgroup whose limit the caller writes as the
kubelet does, resources + RuntimeClass overhead), with the boot memory Kata 4's runtime-rs
gives the pod (``overhead_memory`` 32 MiB + the pod's 480 MiB), DIMM slots and ``maxmem``,
and its QMP monitor where the plugin is told runtime-rs keeps it for that sandbox id. The
pods themselves run under runc behind a handler named as kata-deploy names runtime-rs's.

    with kata_pod(rig, guest_dir, "v2.3", where) as stack:
        stack.resize(1024)          # the kubelet's doPodResizeAction, 1.36's order
        stack.guest_shows(...)      # the guest's own MemTotal
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from tests.support.guestvm import GuestSpec
from tests.support.memcg import CgroupGuestVM, MemoryCgroup
from tests.support.node import (
    KATA_HANDLER,
    CriStatus,
    Node,
    Rig,
    hierarchy_path,
    resources,
    running_node,
)
from tests.support.nri_plugin import NriPlugin
from tests.support.service import Service, start

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


@contextlib.contextmanager
def kata_pod(rig: Rig, guest_dir: Path, series: str, where: Path) -> Iterator[Stack]:
    """A node of containerd ``series`` with serve and the plugin, and one Kata pod whose VM
    is a guest booted as Kata 4 boots the pod; everything stopped at the end. ``where`` is
    a directory for serve's state and the logs. :raises CgroupUnavailable: no memory
    cgroup can be made here."""
    config = kata_config(where)
    vm_root = Path(tempfile.mkdtemp(prefix="kmvm-", dir="/tmp"))
    cg = MemoryCgroup.create(f"kmnri{series.replace('.', '')}")
    with cg, running_node(rig, series) as node:
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
