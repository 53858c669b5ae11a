"""The guest's own ceiling against a real guest: the test guest (Debian 6.1
kernel under TCG) onlines hot-added memory movable (``memhp_default_state=online_movable``
in tests/support/guestvm.py), so every hot-add's struct pages come from its 512 MiB of
boot memory. Asked for 40 GiB, it used to panic (pc-dimm: after kata-mem said Resized;
virtio-mem: mid-grow). kata-mem now plans only what the boot memory can describe, the
guest lives, and its own MemTotal grows by exactly what kata-mem reports.

Onlined to a kernel zone instead (``memhp_default_state=online_kernel``), the same grow is
staged and reaches the full 40 GiB.

memmap_on_memory: the test kernel (Linux 6.1) applies it only to a range of exactly one
memory block (``mhp_supports_memmap_on_memory``), never to a DIMM of several, and
virtio-mem never asks for it; kata-mem counts on it only when told. So it is tested on a
one-block DIMM (the last test): the guest takes the DIMM's struct pages from the DIMM itself
and kata-mem still confirms the grow from the guest's MemTotal.

Backing: the movable plan is clamped to 16 GiB, which QEMU backs under this machine's default
overcommit heuristic (24 GiB of RAM), so no sysctl is touched. The virtio-mem device's
40 GiB region is a ``memory-backend-ram`` with ``reserve=off`` (MAP_NORESERVE): it
reserves nothing, so the heuristic does not refuse its size. The staged pc-dimm grow
plugs a 24 GiB DIMM, which kata-mem backs with a reserving ``memory-backend-ram``: that
test sets ``vm.overcommit_memory=1`` for its duration and puts the old value back
(the guest touches only the struct pages, about 640 MiB of host memory).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import kata_mem_process
from tests.support.configs import guest_config, write_config
from tests.support.guestvm import BootGuest, GuestSpec

pytestmark = pytest.mark.guest

FORTY_GIB_MIB = 40 * 1024
HOST = ("--host-memory", "64Gi", "--host-cpus", "4", "--host-arch", "amd64")


def _spec(virtio: bool) -> GuestSpec:
    extra: tuple[str, ...] = ()
    if virtio:
        extra = (
            "-object",
            f"memory-backend-ram,id=bigmem,size={FORTY_GIB_MIB}M,reserve=off",
            "-device",
            "pcie-root-port,id=rp1,bus=pcie.0,chassis=1,slot=1",
            "-device",
            "virtio-mem-pci,id=virtiomem0,memdev=bigmem,requested-size=0,block-size=2M,bus=rp1",
        )
    return GuestSpec(maxmem_mib=48 * 1024, virtio_mem_mib=0, extra_qemu_args=extra)


@pytest.mark.parametrize("virtio", [False, True], ids=["pc-dimm", "virtio-mem"])
def test_a_40gi_grow_of_a_512mib_movable_guest_stops_where_it_can_describe(
    boot_guest: BootGuest, tmp_path: Path, virtio: bool
) -> None:
    vm = boot_guest(_spec(virtio))
    before = vm.status()
    cfg = guest_config(tmp_path, virtio=virtio, maxmem=0, timeout=300)
    r = kata_mem_process(
        "apply", "--config", str(cfg), "--qmp", str(vm.qmp_socket), "--limit", "40Gi",
        "--json", *HOST,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["status"] == "Resized", doc
    grown_mib = doc["observed_mib"] - 512
    # 3/4 x 512 MiB - 128 MiB headroom (or less, by the guest's own MemAvailable) of struct
    # pages, 64 bytes per 4 KiB: at most 16384 MiB more, far from the 40 GiB asked.
    assert 0 < grown_mib <= 16384 and doc["target_mib"] == doc["observed_mib"], doc
    # The guest onlines all of it and lives: its MemTotal grows by what kata-mem reports.
    after = vm.wait_mem(lambda m: m.total_kb - before.total_kb >= grown_mib * 1024, timeout=300)
    assert after.total_kb - before.total_kb == grown_mib * 1024
    vm.alloc(256)
    assert vm.status().total_kb == after.total_kb


OVERCOMMIT = Path("/proc/sys/vm/overcommit_memory")


@pytest.fixture
def overcommit() -> Iterator[None]:
    """``vm.overcommit_memory=1`` while the test runs, the old value back after it."""
    before = OVERCOMMIT.read_text()
    OVERCOMMIT.write_text("1")
    try:
        yield
    finally:
        OVERCOMMIT.write_text(before)


@pytest.mark.parametrize("virtio", [False, True], ids=["pc-dimm", "virtio-mem"])
def test_onlined_to_a_kernel_zone_the_grow_is_staged_to_the_full_40gi(
    boot_guest: BootGuest, tmp_path: Path, virtio: bool, request: pytest.FixtureRequest
) -> None:
    if not virtio:
        request.getfixturevalue("overcommit")
    spec = _spec(virtio)
    vm = boot_guest(
        GuestSpec(
            maxmem_mib=spec.maxmem_mib,
            virtio_mem_mib=0,
            extra_qemu_args=spec.extra_qemu_args,
            online_state="online_kernel",
        )
    )
    before = vm.status()
    cfg = write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": 0,
            "memory_slots": 8,
            "enable_virtio_mem": virtio,
            "kernel_params": "memhp_default_state=online_kernel",
        },
        kata_mem={"state_dir": str(tmp_path / "state"), "step_timeout_s": 60},
    )
    r = kata_mem_process(
        "apply", "--config", str(cfg), "--qmp", str(vm.qmp_socket), "--limit", "40Gi",
        "--json", *HOST, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # The full 512 + 40960 MiB, in more than one step: the first within what 512 MiB can
    # describe (at most 16384 MiB), the next paid by what the first step onlined.
    assert (doc["status"], doc["observed_mib"]) == ("Resized", 512 + FORTY_GIB_MIB), doc
    assert len(doc["steps"]) >= 2 and doc["steps"][0]["delta_mib"] <= 16384, doc
    after = vm.status()
    assert after.total_kb - before.total_kb == FORTY_GIB_MIB * 1024
    vm.alloc(256)
    assert vm.status().total_kb == after.total_kb


@pytest.mark.parametrize(
    "memmap_on_memory", [False, True], ids=["memmap-in-boot", "memmap-on-memory"]
)
def test_a_one_block_dimm_with_memmap_on_memory_is_confirmed_by_the_guest(
    boot_guest: BootGuest, tmp_path: Path, memmap_on_memory: bool
) -> None:
    """Where the test kernel does memmap_on_memory (Linux 6.1: a range of exactly one memory
    block, ``mhp_supports_memmap_on_memory``; CONFIG_MHP_MEMMAP_ON_MEMORY=y in Debian's): a
    one-block DIMM carries its own struct pages, 2 MiB of its 128, which MemTotal then leaves
    out. kata-mem still confirms the grow from the guest (``guestmem.shows_grow`` allows for
    them) and says Resized; without the option MemTotal grows by the whole DIMM."""
    args = ("memory_hotplug.memmap_on_memory=1",) if memmap_on_memory else ()
    vm = boot_guest(GuestSpec(virtio_mem_mib=0, kernel_args=args))
    before = vm.status()
    cfg = guest_config(tmp_path, virtio=False, timeout=120, guest_memmap_on_memory=memmap_on_memory)
    r = kata_mem_process(
        "apply", "--config", str(cfg), "--qmp", str(vm.qmp_socket), "--limit", "128Mi",
        "--json", *HOST,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["status"], doc["observed_mib"]) == ("Resized", 640), doc
    kept_kib = 2 * 1024 if memmap_on_memory else 0  # 128 MiB / 4 KiB x 64 bytes
    after = vm.wait_mem(lambda m: m.total_kb > before.total_kb, timeout=120)
    assert after.total_kb - before.total_kb == 128 * 1024 - kept_kib
    vm.alloc(64)
    assert vm.is_alive()
