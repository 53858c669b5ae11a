"""The rules every backend shares (kata_mem.reports), and the port they serve: what a
hypervisor's raw reports mean, written once for QMP, libvirt and the fake."""

from __future__ import annotations

import inspect

import pytest

from kata_mem.backends import Backend
from kata_mem.model import MemoryDevice, Step, VmState
from kata_mem.reports import U64_UNSET, UsageField, balloon_usage, resize_progress, vm_state
from kata_mem.units import KiB, MiB

QMP_NAMES: dict[UsageField, str] = {
    "total": "stat-total-memory",
    "available": "stat-available-memory",
    "free": "stat-free-memory",
    "disk_caches": "stat-disk-caches",
    "major_faults": "stat-major-faults",
}


def dimm(i: int, mib: int, slot: int) -> MemoryDevice:
    return MemoryDevice(
        f"kmdimm{i}", "dimm", mib * MiB, mib * MiB, mib * MiB, slot=slot, memdev=f"kmmem{i}"
    )


VIRTIO = MemoryDevice("vm0", "virtio-mem", 256 * MiB, 256 * MiB, 1024 * MiB, 2 * MiB)


def test_the_port_has_at_most_five_methods_and_no_release() -> None:
    methods = {n for n, v in inspect.getmembers(Backend) if callable(v) and not n.startswith("_")}
    assert methods == {"observe", "begin", "poll", "guest_usage", "close"}


def test_device_space_counts_virtio_mem_whole_and_other_devices() -> None:
    # QEMU: maxmem - boot memory, less what nvdimm & co. take; virtio-mem reserves its region.
    vm = vm_state(
        base=512 * MiB,
        maxmem=4608 * MiB,
        slots=4,
        devices=[dimm(0, 256, 0), VIRTIO],
        unmanaged=[128 * MiB],
    )
    assert (vm.base, vm.total, vm.device_space) == (512 * MiB, 1024 * MiB, 3968 * MiB)
    assert vm.space_used == (256 + 1024) * MiB


def test_boot_memory_from_numa_cells_or_from_the_total() -> None:
    devices = [dimm(0, 256, 0), VIRTIO]
    # libvirt: the NUMA cells are the boot memory ...
    assert vm_state(numa_cells=[256 * MiB, 256 * MiB], devices=devices).base == 512 * MiB
    # ... else <memory> counts boot memory plus every device's space.
    total = (512 + 256 + 1024 + 128) * MiB
    vm = vm_state(memory=total, maxmem=8192 * MiB, devices=devices, unmanaged=[128 * MiB])
    assert (vm.base, vm.device_space) == (512 * MiB, (8192 - 512 - 128) * MiB)


def test_unknown_device_space_stays_unknown() -> None:
    assert vm_state(base=512 * MiB, devices=[]).device_space is None


@pytest.mark.parametrize(
    ("slots", "devices", "want"),
    [
        (4, [dimm(0, 128, 0)], 4),  # reported: kept
        (0, [dimm(0, 128, 0), dimm(1, 128, 3)], 4),  # QEMU before 7.1: the highest slot seen
        (0, [VIRTIO], 0),  # no DIMM: nothing to guess from
    ],
)
def test_slots_are_guessed_only_when_not_reported(
    slots: int, devices: list[MemoryDevice], want: int
) -> None:
    assert vm_state(base=512 * MiB, slots=slots, devices=devices).slots == want


def test_orphans_are_kata_mem_objects_no_device_uses() -> None:
    vm = vm_state(
        base=512 * MiB,
        devices=[dimm(0, 128, 0)],
        backend_objects=["kmmem0", "kmmem1", "mem-boot", "pc.ram"],
    )
    assert vm.orphans == ("kmmem1",)


def test_resize_is_done_only_when_plugged_reaches_the_step() -> None:
    step = Step("resize_virtio_mem", "vm0", 768 * MiB, -256 * MiB, 1280 * MiB)

    def dev(size: int, requested: int) -> MemoryDevice:
        return MemoryDevice("vm0", "virtio-mem", size * MiB, requested * MiB, 2048 * MiB, 2 * MiB)

    assert resize_progress(step, dev(768, 768)).state == "done"
    pending = resize_progress(step, dev(900, 768))
    assert (pending.state, pending.detail) == ("pending", "plugged 900 MiB, requested 768 MiB")
    # Reached, but someone asked for another size since: not this step's result.
    assert resize_progress(step, dev(512, 512)).state == "pending"
    gone = resize_progress(step, None)
    assert (gone.state, gone.detail) == ("rejected", "virtio-mem device vm0 is gone")


def test_balloon_statistics_unset_is_unknown_never_zero() -> None:
    stats = {
        "stat-total-memory": 1024 * MiB,
        "stat-available-memory": U64_UNSET,  # QEMU's "not reported"
        "stat-free-memory": -1,
        "stat-disk-caches": True,  # not a number
        "stat-major-faults": 7,
    }
    u = balloon_usage(stats, names=QMP_NAMES, unit=1, last_update=1000, observed_at=1002.5)
    assert (u.total, u.available, u.free, u.disk_caches, u.major_faults) == (
        1024 * MiB,
        None,
        None,
        None,
        7,
    )
    assert (u.last_update, u.age) == (1000.0, 2.5)


@pytest.mark.parametrize("stamp", [0, -5, None, "1000", True])
def test_a_reading_without_a_stamp_has_no_age(stamp: object) -> None:
    u = balloon_usage({}, names=QMP_NAMES, unit=1, last_update=stamp, observed_at=1000.0)
    assert (u.last_update, u.age) == (None, None)


def test_sizes_are_scaled_to_bytes_and_counts_are_not() -> None:
    names: dict[UsageField, str] = {
        "total": "available",
        "available": "usable",
        "free": "unused",
        "disk_caches": "disk_caches",
        "major_faults": "major_fault",
    }
    stats = {"available": 1024, "usable": 512, "unused": 256, "disk_caches": 128, "major_fault": 3}
    u = balloon_usage(stats, names=names, unit=KiB, last_update=5, observed_at=5.0)
    assert (u.total, u.available, u.free, u.disk_caches, u.major_faults) == (
        1024 * KiB,
        512 * KiB,
        256 * KiB,
        128 * KiB,
        3,
    )


def test_vm_state_is_what_the_planner_reads() -> None:
    vm = vm_state(base=512 * MiB, maxmem=1536 * MiB, slots=2, devices=[dimm(0, 256, 0)])
    assert vm == VmState(512 * MiB, (dimm(0, 256, 0),), slots=2, device_space=1024 * MiB)
