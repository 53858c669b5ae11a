"""The memory behind a DIMM kata-mem plugs, on the real guest (QEMU under TCG): with
``shared_fs = "virtio-fs"`` (Kata's default) a ``memory-backend-file`` in /dev/shm,
shared, as Kata backs its own DIMMs (kata_mem.core.backing); with ``shared_fs =
"none"`` private RAM. The guest's own MemTotal grows by the DIMM; the file QEMU creates
in /dev/shm is unlinked at once (softmmu/physmem.c ``file_ram_open``), so nothing is left
on the host, and QEMU keeps its descriptor, which is what a vhost-user daemon such as
virtiofsd is handed to map the DIMM (hw/virtio/vhost-user.c ``vhost_user_get_mr_data``:
``memory_region_get_fd``). Unplugging the DIMM (the guest onlines it movable) leaves no
object, mapping or descriptor behind. Behind libvirt, the domain's ``<memoryBacking>``
decides, and kata-mem's DIMM XML leaves it to it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CliResult, apply_qmp
from tests.support.configs import GUEST_KERNEL_PARAMS, HOST_ARGS, write_config
from tests.support.guestvm import BootGuest, GuestSpec, GuestVM
from tests.support.libvirt_guest import BootLibvirtGuest, LibvirtGuest
from tests.support.qmp_min import QMPClient
from tests.support.waits import wait_until

pytestmark = pytest.mark.guest
Run = Callable[..., CliResult]
KiB_PER_MiB = 1024
#: The name QEMU gives the file it creates in a directory given as mem-path
#: (``file_ram_open``: ``%s/qemu_back_mem.%s.XXXXXX`` with the backend's id).
BACKING_FILE = "/dev/shm/qemu_back_mem.kmmem"


def _backing_fds(vm: GuestVM) -> list[str]:
    """Where QEMU's open descriptors on a DIMM backing file in /dev/shm lead."""
    fd_dir = Path(f"/proc/{vm.pid}/fd")
    found = []
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith(BACKING_FILE):
            found.append(target)
    return found


def _backing_maps(vm: GuestVM) -> set[str]:
    """The DIMM backing files in /dev/shm that QEMU has mapped."""
    maps = Path(f"/proc/{vm.pid}/maps").read_text()
    return {line.split(None, 5)[5] for line in maps.splitlines() if BACKING_FILE in line}


def _kata_mem_objects(vm: GuestVM) -> dict[str, str]:
    with QMPClient(vm.qmp_socket) as q:
        listed = q.execute("qom-list", {"path": "/objects"})
    return {o["name"]: o["type"] for o in listed if o["name"].startswith("kmmem")}


@pytest.mark.parametrize(
    ("shared_fs", "qom_type", "share", "mem_path"),
    [
        ("virtio-fs", "memory-backend-file", True, "/dev/shm"),
        ("none", "memory-backend-ram", False, None),
    ],
)
def test_a_dimm_gets_kata_s_memory_grows_the_guest_and_leaves_nothing_when_unplugged(
    boot_guest: BootGuest,
    run_cli: Run,
    tmp_path: Path,
    shared_fs: str,
    qom_type: str,
    share: bool,
    mem_path: str | None,
) -> None:
    vm = boot_guest(GuestSpec(virtio_mem_mib=0))  # memhp_default_state=online_movable
    cfg = write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "memory_slots": 8,
            "shared_fs": shared_fs,
            "kernel_params": GUEST_KERNEL_PARAMS,  # as the guest boots
        },
        kata_mem={"state_dir": str(tmp_path / "state"), "step_timeout_s": 20},
    )
    base_kb = vm.status().total_kb

    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--limit", "256Mi")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768), doc
    grown = vm.wait_mem(lambda m: m.total_kb >= base_kb + 256 * KiB_PER_MiB)
    assert grown.total_kb == base_kb + 256 * KiB_PER_MiB  # the guest's own reading
    with QMPClient(vm.qmp_socket) as q:
        (dimm,) = [d["data"] for d in q.execute("query-memory-devices") if d["type"] == "dimm"]
        memdev = dimm["memdev"]
        assert q.execute("qom-get", {"path": memdev, "property": "share"}) is share
        if mem_path is not None:
            assert q.execute("qom-get", {"path": memdev, "property": "mem-path"}) == mem_path
    assert _kata_mem_objects(vm) == {"kmmem0": f"child<{qom_type}>"}
    if qom_type == "memory-backend-file":
        # Mapped from a file QEMU unlinked as soon as it made it, whose descriptor it keeps
        # (the one vhost-user hands virtiofsd): nothing of it is left in /dev/shm.
        (fd,) = _backing_fds(vm)
        assert fd.startswith(f"{BACKING_FILE}0.") and fd.endswith(" (deleted)"), fd
        assert _backing_maps(vm) == {fd}
        assert not os.path.exists(fd.removesuffix(" (deleted)"))
    else:
        # Private anonymous memory: no descriptor, nothing a vhost-user daemon could map.
        assert (_backing_fds(vm), _backing_maps(vm)) == ([], set())

    code, doc = apply_qmp(run_cli, cfg, vm.qmp_socket, "--allow-shrink")
    assert (code, doc["status"], doc["observed_mib"]) == (0, "Resized", 512), doc
    assert vm.wait_mem(lambda m: m.total_kb <= base_kb).total_kb == base_kb
    with QMPClient(vm.qmp_socket) as q:
        assert q.execute("query-memory-devices") == []
    assert _kata_mem_objects(vm) == {}
    # object-del frees the memory after an RCU grace period, in QEMU's RCU thread
    # (softmmu/physmem.c qemu_ram_free: call_rcu(reclaim_ramblock), which unmaps and
    # closes the descriptor): the last reference to the unlinked file goes then.
    wait_until(
        lambda: not _backing_fds(vm) and not _backing_maps(vm),
        lambda: (
            f"QEMU to let go of the DIMM's file: it holds {_backing_fds(vm)}, "
            f"maps {_backing_maps(vm)}"
        ),
    )


def _monitor(vm: LibvirtGuest, command: str, **arguments: object) -> Any:
    """A QMP command sent through libvirt (``virsh qemu-monitor-command``), its return."""
    sent = json.dumps({"execute": command, "arguments": arguments})
    return json.loads(vm.virsh("qemu-monitor-command", vm.name, sent))["return"]


@pytest.mark.libvirt
@pytest.mark.parametrize(
    ("memory_backing", "qom_type", "share"),
    [
        ("<source type='memfd'/><access mode='shared'/>", "memory-backend-memfd", True),
        ("", "memory-backend-ram", False),
    ],
)
def test_libvirt_backs_a_dimm_as_the_domain_s_memory_backing_says(
    boot_libvirt_guest: BootLibvirtGuest,
    run_cli: Run,
    tmp_path: Path,
    memory_backing: str,
    qom_type: str,
    share: bool,
) -> None:
    # kata-mem's <memory model='dimm'> names no source or access: libvirt takes them from
    # the domain's NUMA cell, then its <memoryBacking> (qemu_command.c
    # qemuBuildMemoryBackendProps), which a domain with virtiofs must make shared.
    vm = boot_libvirt_guest(GuestSpec(virtio_mem_mib=0, memory_backing=memory_backing))
    cfg = write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 4096,
            "memory_slots": 8,
            "kernel_params": GUEST_KERNEL_PARAMS,  # as the guest boots
        },
        kata_mem={"state_dir": str(tmp_path / "state"), "step_timeout_s": 20},
    )
    base_kb = vm.status().total_kb
    r = run_cli(
        "apply",
        *("--config", str(cfg), "--libvirt", vm.uri, "--domain", vm.name, "--sandbox", "sb"),
        *HOST_ARGS,
        *("--json", "--limit", "256Mi"),
    )
    doc = json.loads(r.out)
    assert (r.code, doc["status"], doc["observed_mib"]) == (0, "Resized", 768), doc
    assert vm.wait_mem(lambda m: m.total_kb >= base_kb + 256 * KiB_PER_MiB).total_kb == (
        base_kb + 256 * KiB_PER_MiB
    )
    (dimm,) = [d["data"] for d in _monitor(vm, "query-memory-devices") if d["type"] == "dimm"]
    memdev = dimm["memdev"]
    types = {o["name"]: o["type"] for o in _monitor(vm, "qom-list", path="/objects")}
    assert types[memdev.removeprefix("/objects/")] == f"child<{qom_type}>"
    assert _monitor(vm, "qom-get", path=memdev, property="share") is share
