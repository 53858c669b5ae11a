"""What a hypervisor's raw reports mean, one rule each, for every backend. Pure.

Backends read the wire (QMP replies, libvirt XML and stats), convert its units
to bytes, and hand the values here: how much boot memory and device-memory space
a VM has, which of its backend objects are orphans, whether a virtio-mem resize
is done, and what the balloon statistics say. So the backends translate and this
module concludes; the rules cannot drift apart between QEMU and libvirt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Optional

from kata_mem.model import MEMDEV_PREFIX, GuestUsage, MemoryDevice, Step, VmState
from kata_mem.units import fmt_bytes

Progress = Literal["done", "pending", "rejected"]
#: QEMU reports an unset balloon statistic as u64 -1.
U64_UNSET = (1 << 64) - 1


@dataclass(frozen=True)
class StepProgress:
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
    backend_objects: Iterable[str] = (),
) -> VmState:
    """The VM as a hypervisor reports it.

    ``devices`` are its DIMMs and virtio-mem devices; ``unmanaged`` the sizes of
    other memory devices (nvdimm, virtio-pmem, sgx-epc): not RAM kata-mem resizes,
    but they take device-memory space. Boot memory is ``base`` when the hypervisor
    reports it, else the sum of its NUMA cells, else ``memory`` (boot memory plus
    the space of every memory device, as libvirt's ``<memory>`` counts it) less the
    devices. ``maxmem`` is QEMU's ``maxmem`` (None when unknown); ``slots`` 0 means
    not reported, and then the highest slot in use is the best guess (QEMU before
    7.1). ``backend_objects`` are the hypervisor's object ids: those with kata-mem's
    prefix that no device uses are orphans.
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
        orphans=tuple(
            o for o in backend_objects if o.startswith(MEMDEV_PREFIX) and o not in in_use
        ),
    )


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


#: The :class:`~kata_mem.model.GuestUsage` fields that balloon statistics fill.
UsageField = Literal["total", "available", "free", "disk_caches", "major_faults"]


def balloon_usage(
    stats: Mapping[str, object],
    *,
    names: Mapping[UsageField, str],
    unit: int,
    last_update: object,
    observed_at: float,
) -> GuestUsage:
    """Guest usage from balloon statistics as a hypervisor reports them.

    ``names`` gives the hypervisor's name for each field; sizes are in ``unit``
    bytes (major faults are a count). A statistic the guest does not report
    (absent, negative, QEMU's u64 -1) is unknown, never zero. ``last_update`` is
    the hypervisor's stamp of the reading, in whole seconds; ``observed_at`` when
    it was read (host clock).
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
    )
