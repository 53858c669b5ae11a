"""The rules every backend shares (kata_mem.core.reports), and the port they serve: what a
hypervisor's raw reports mean, written once for QMP, libvirt and the fake."""

from __future__ import annotations

import inspect

import pytest

from kata_mem.backends import Backend
from kata_mem.core.model import BackendObject, MemoryDevice, OwnedDevice, Step, VmState
from kata_mem.core.reports import (
    U64_UNSET,
    UsageField,
    balloon_usage,
    owned_view,
    resize_progress,
    still_owned,
    vm_state,
)
from kata_mem.core.units import KiB, MiB

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


def test_the_port_has_seven_methods_and_no_release() -> None:
    # set_stats_interval and read_and_ask (which asks the guest for a reading) are the
    # executor's to call (only the executor orders side effects; connecting and reading
    # change nothing).
    methods = {n for n, v in inspect.getmembers(Backend) if callable(v) and not n.startswith("_")}
    assert methods == {
        "observe",
        "begin",
        "poll",
        "guest_usage",
        "read_and_ask",
        "set_stats_interval",
        "close",
    }


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


def test_loose_objects_are_memory_backends_no_device_uses() -> None:
    vm = vm_state(
        base=512 * MiB,
        devices=[dimm(0, 128, 0)],
        memory_backends={"kmmem0": 128 * MiB, "kmmem1": 128 * MiB, "pc.ram": 512 * MiB},
        other_ids=["kmmem0", "kmmem1", "pc.ram", "rng0", "kmdimm0"],
    )
    assert vm.loose == (BackendObject("kmmem1", 128 * MiB), BackendObject("pc.ram", 512 * MiB))
    assert vm.backend_objects and vm.orphans == () and vm.unproven == ()
    assert vm.taken_ids == {"kmdimm0", "kmmem0", "kmmem1", "pc.ram", "rng0"}
    # libvirt shows no backend objects: none are loose, and DIMMs have none to delete.
    assert not vm_state(base=512 * MiB, devices=[dimm(0, 128, 0)]).backend_objects


MINE = OwnedDevice("kmdimm3", "kmmem3", 256 * MiB, confirmed=True)


def _dimm(id_: str, memdev: str, mib: int = 256) -> MemoryDevice:
    return MemoryDevice(id_, "dimm", mib * MiB, mib * MiB, mib * MiB, slot=0, memdev=memdev)


@pytest.mark.parametrize(
    ("device", "ours", "unproven"),
    [
        (_dimm("kmdimm3", "kmmem3"), True, ()),  # id, backend and size as recorded
        (_dimm("kmdimm3", "foreign0"), False, ("kmdimm3",)),  # someone else's backend
        (_dimm("kmdimm3", "kmmem3", 512), False, ("kmdimm3",)),  # another size
        (_dimm("kmdimm4", "kmmem4"), False, ("kmdimm4",)),  # named like ours, not recorded
        (_dimm("dimm-cold", "mem1"), False, ()),  # someone else's, and not a look-alike
        (_dimm("other", "kmmem9"), False, ("other",)),  # on a backend named like ours
    ],
    ids=["recorded", "foreign-memdev", "other-size", "unrecorded", "foreign", "alike-memdev"],
)
def test_a_dimm_is_ours_only_as_the_journal_recorded_it(
    device: MemoryDevice, ours: bool, unproven: tuple[str, ...]
) -> None:
    vm = owned_view(vm_state(base=512 * MiB, devices=[device], memory_backends={}), [MINE])
    assert (vm.devices[0].ours, vm.unproven) == (ours, unproven)
    assert vm_state(base=512 * MiB, devices=[device]).devices[0].ours is False  # backends never say


@pytest.mark.parametrize(
    ("objects", "orphans", "unproven"),
    [
        ({"kmmem3": 256 * MiB}, ("kmmem3",), ()),  # its DIMM is gone: kata-mem's, deleted
        ({"kmmem3": 128 * MiB}, (), ("kmmem3",)),  # not the size kata-mem made it
        ({"kmmem7": 128 * MiB}, (), ("kmmem7",)),  # never recorded
        ({"pc.ram": 512 * MiB}, (), ()),  # the machine's own RAM
    ],
    ids=["recorded", "other-size", "unrecorded", "boot-ram"],
)
def test_an_object_is_an_orphan_only_as_the_journal_recorded_it(
    objects: dict[str, int], orphans: tuple[str, ...], unproven: tuple[str, ...]
) -> None:
    vm = owned_view(vm_state(base=512 * MiB, devices=[], memory_backends=objects), [MINE])
    assert (vm.orphans, vm.unproven) == (orphans, unproven)
    assert owned_view(vm, []).orphans == ()  # no record, no orphans


def test_libvirt_dimms_are_ours_by_alias_and_size_as_recorded() -> None:
    entry = OwnedDevice("kmdimm0", "", 256 * MiB)
    vm = owned_view(vm_state(base=512 * MiB, devices=[_dimm("kmdimm0", "")]), [entry])
    assert vm.devices[0].ours
    other = owned_view(vm_state(base=512 * MiB, devices=[_dimm("kmdimm0", "", 128)]), [entry])
    assert not other.devices[0].ours and other.unproven == ("kmdimm0",)


@pytest.mark.parametrize(
    ("devices", "objects", "kept"),
    [
        ([_dimm("kmdimm3", "kmmem3")], {}, [MINE]),  # still plugged
        ([], {"kmmem3": 256 * MiB}, [MINE]),  # its backend is left: deleted next
        ([], {}, []),  # unplugged and deleted: forgotten
        ([_dimm("kmdimm3", "foreign0")], {"foreign0": 0}, []),  # replaced by someone else's
    ],
    ids=["plugged", "orphan-left", "gone", "replaced"],
)
def test_the_journal_forgets_what_is_gone(
    devices: list[MemoryDevice], objects: dict[str, int], kept: list[OwnedDevice]
) -> None:
    vm = vm_state(base=512 * MiB, devices=devices, memory_backends=objects)
    assert still_owned(vm, [MINE]) == kept


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
    assert vm == VmState(
        512 * MiB, (dimm(0, 256, 0),), slots=2, device_space=1024 * MiB, backend_objects=False
    )
