"""What a hypervisor's raw reports mean, one rule each, for every backend. Pure.

Backends read the wire (QMP replies, libvirt XML and stats), convert its units
to bytes, and hand the values here: how much boot memory and device-memory space
a VM has, whether a virtio-mem resize is done, and what the balloon statistics
say. Which of its devices and backend objects are kata-mem's is decided here too,
from kata-mem's journal (:func:`owned_view`), never from a name. So the backends translate and this
module concludes; the rules cannot drift apart between QEMU and libvirt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, Optional

from kata_mem.core.model import (
    DIMM_PREFIX,
    MEMDEV_PREFIX,
    BackendObject,
    GuestUsage,
    MemoryDevice,
    OwnedDevice,
    Step,
    VmState,
)
from kata_mem.core.units import fmt_bytes
from kata_mem.core.values import Frozen, replace

Progress = Literal["done", "pending", "rejected"]
#: QEMU reports an unset balloon statistic as u64 -1.
U64_UNSET = (1 << 64) - 1


class StepProgress(Frozen):
    """Where a step stands, from the hypervisor's own report."""

    state: Progress
    detail: str = ""


def vm_state(
    *,
    devices: Sequence[MemoryDevice],
    base: Optional[int] = None,
    numa_cells: Sequence[int] = (),
    memory: int = 0,
    maxmem: Optional[int] = None,
    slots: int = 0,
    unmanaged: Sequence[int] = (),
    unmanaged_regions: Sequence[tuple[str, int, int]] = (),
    memory_backends: Optional[Mapping[str, int]] = None,
    other_ids: Iterable[str] = (),
) -> VmState:
    """The VM as a hypervisor reports it, before anything is known about whose it is.

    ``devices`` are its DIMMs and virtio-mem devices; ``unmanaged`` the sizes of
    other memory devices (nvdimm, virtio-pmem, sgx-epc): not RAM kata-mem resizes,
    but they take device-memory space (``unmanaged_regions``: where, when known). Boot memory is ``base`` when the hypervisor
    reports it, else the sum of its NUMA cells, else ``memory`` (boot memory plus
    the space of every memory device, as libvirt's ``<memory>`` counts it) less the
    devices. ``maxmem`` is QEMU's ``maxmem`` (None when unknown); ``slots`` 0 means
    not reported, and then the highest slot in use is the best guess (QEMU before
    7.1). ``memory_backends`` are the hypervisor's memory backend objects, id to
    size, of which those no device uses and named like kata-mem's are enough (None: it
    shows none, as libvirt); ``other_ids`` every other id it uses.
    """
    if base is None:
        base = (
            sum(numa_cells)
            if numa_cells
            else memory - sum(d.space for d in devices) - sum(unmanaged)
        )
    dimm_slots = [d.slot for d in devices if d.kind == "dimm" and d.slot is not None]
    if not slots and dimm_slots:
        slots = max(dimm_slots) + 1
    in_use = {d.memdev for d in devices}
    return VmState(
        base=base,
        devices=tuple(devices),
        slots=slots,
        device_space=None if maxmem is None else maxmem - base - sum(unmanaged),
        loose=tuple(
            BackendObject(oid, size)
            for oid, size in (memory_backends or {}).items()
            if oid not in in_use
        ),
        other_ids=tuple(sorted(set(other_ids))),
        backend_objects=memory_backends is not None,
        other_regions=tuple(unmanaged_regions),
    )


def _made(entry: OwnedDevice, dev: MemoryDevice) -> bool:
    return (dev.kind, dev.id, dev.memdev, dev.size) == (
        entry.kind,
        entry.id,
        entry.memdev,
        entry.size,
    )


def _left(entry: OwnedDevice, obj: BackendObject) -> bool:
    return bool(entry.memdev) and (obj.id, obj.size) == (entry.memdev, entry.size)


def owned_view(vm: VmState, owned: Sequence[OwnedDevice]) -> VmState:
    """The VM with what kata-mem's journal proves is its own marked, never by a name.

    A DIMM is kata-mem's when its id, backend object and size are all as recorded
    when kata-mem plugged it. A backend object no device uses is an orphan (kata-mem's,
    safe to delete) when it is the recorded backend of one of its DIMMs, at the
    recorded size. DIMMs and objects named like kata-mem's that are neither are
    ``unproven``: reported, and left alone.
    """
    devices = tuple(replace(d, ours=any(_made(e, d) for e in owned)) for d in vm.devices)
    orphans = tuple(o.id for o in vm.loose if any(_left(e, o) for e in owned))
    unproven = [
        d.id
        for d in devices
        if d.kind == "dimm"
        and not d.ours
        and (d.id.startswith(DIMM_PREFIX) or d.memdev.startswith(MEMDEV_PREFIX))
    ]
    unproven += [o.id for o in vm.loose if o.id not in orphans and o.id.startswith(MEMDEV_PREFIX)]
    return replace(vm, devices=devices, orphans=orphans, unproven=tuple(unproven))


def still_owned(vm: VmState, owned: Sequence[OwnedDevice]) -> list[OwnedDevice]:
    """The journal's entries that still name something of kata-mem's in the VM: its
    DIMM, or its backend object left behind. The others (unplugged and deleted, a plug
    that never happened, or replaced by someone else's) are forgotten."""
    return [
        e
        for e in owned
        if any(_made(e, d) for d in vm.devices) or any(_left(e, o) for o in vm.loose)
    ]


def resize_progress(step: Step, dev: Optional[MemoryDevice]) -> StepProgress:
    """Whether a virtio-mem resize is done: the device's plugged size has reached
    the step's ``requested-size`` (a requested size alone is never done)."""
    if dev is None:
        return StepProgress("rejected", f"virtio-mem device {step.device} is gone")
    if dev.size == dev.requested == step.size:
        return StepProgress("done")
    return StepProgress(
        "pending", f"plugged {fmt_bytes(dev.size)}, requested {fmt_bytes(dev.requested)}"
    )


#: The :class:`~kata_mem.core.model.GuestUsage` fields that balloon statistics fill.
UsageField = Literal["total", "available", "free", "disk_caches", "major_faults"]


def balloon_usage(
    stats: Mapping[str, object],
    *,
    names: Mapping[UsageField, str],
    unit: int,
    last_update: object,
    observed_at: float,
    sequence: Optional[int] = None,
) -> GuestUsage:
    """Guest usage from balloon statistics as a hypervisor reports them.

    ``names`` gives the hypervisor's name for each field; sizes are in ``unit``
    bytes (major faults are a count). A statistic the guest does not report
    (absent, negative, QEMU's u64 -1) is unknown, never zero. ``last_update`` is
    the hypervisor's stamp of the reading, in whole seconds; ``observed_at`` when
    it was read (host clock); ``sequence`` the hypervisor's count of readings, if known.
    """

    def count(field: UsageField) -> Optional[int]:
        value = stats.get(names[field])
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < U64_UNSET:
            return None
        return value

    def size(field: UsageField) -> Optional[int]:
        value = count(field)
        return None if value is None else value * unit

    stamp = (
        float(last_update)
        if isinstance(last_update, int) and not isinstance(last_update, bool) and last_update > 0
        else None
    )
    return GuestUsage(
        total=size("total"),
        available=size("available"),
        free=size("free"),
        disk_caches=size("disk_caches"),
        major_faults=count("major_faults"),
        last_update=stamp,
        observed_at=observed_at,
        sequence=sequence,
    )
