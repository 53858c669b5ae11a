"""The steps that take a VM to its target, one mechanism at a time: DIMMs plugged one per
step and unplugged whole (:func:`grow_dimm`, :func:`shrink_dimm`), or the virtio-mem
device's requested size changed (:func:`resize_virtio_mem`). Each stops where the VM
stops it (slots, device space, a region off a block, the guest's own ceiling at each
step) and records that clamp with its cause. Kata's Go runtime does this in the
hypervisor (src/runtime/virtcontainers/qemu.go ``ResizeMemory``, which sandbox.go
``updateResources`` calls)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Optional

from kata_mem.core.guestmem import ceiling_at
from kata_mem.core.model import (
    DIMM_PREFIX,
    KATA_VIRTIO_MEM_ID,
    MEMDEV_PREFIX,
    GuestCeiling,
    GuestPolicy,
    HostFacts,
    Mechanism,
    MemoryCause,
    SizingConfig,
    Step,
    VmState,
)
from kata_mem.core.units import align_down, fmt_bytes

#: Largest ACPI hot-add relative to the current guest memory (Kata's
#: ``acpiMemoryHotplugFactor``): the guest needs ~64 B of memmap per 4 KiB page added.
ACPI_HOTPLUG_FACTOR = 48

#: Records a clamp: its cause, the size it stopped at, and why, in words.
ClampFn = Callable[[MemoryCause, int, str], None]
#: The largest step a grow may make from a guest total (None: no limit).
Cap = Optional[Callable[[int], int]]


def steps_to(
    cfg: SizingConfig,
    mech: Mechanism,
    vm: VmState,
    target: int,
    block: int,
    clamp: ClampFn,
    cap: Cap,
) -> tuple[tuple[Step, ...], int]:
    """The steps from the VM's total to ``target`` by ``mech``, and the total they reach
    (``target``, or where a clamp stopped them). ``cap`` bounds each grow step."""
    if target > vm.total:
        if mech == "pc-dimm":
            return grow_dimm(vm, target, block, clamp, cap)
        return resize_virtio_mem(cfg, vm, target, block, clamp, cap)
    if target < vm.total:
        if mech == "pc-dimm":
            return shrink_dimm(vm, target, clamp)
        return resize_virtio_mem(cfg, vm, target, block, clamp)
    return (), target


def stage_cap(
    cfg: SizingConfig,
    host: HostFacts,
    base: int,
    policy: GuestPolicy,
    block: int,
    start: int,
    first: GuestCeiling,
) -> Cap:
    """What one grow step from a total may add: the memory the guest can describe then
    (:func:`~kata_mem.core.guestmem.ceiling_at`), in whole blocks. ``first`` is the ceiling
    at ``start``, with the guest's fresh reading when there is one: it counts for the first
    step only, later ones are estimated (the executor reads the guest again before each).
    None where memmap_on_memory is counted."""
    if policy.memmap_on_memory:
        return None

    def cap(total: int) -> int:
        if total == start:
            return align_down(first.addable, block)
        return align_down(ceiling_at(policy, cfg.settings, host.arch, base, total).addable, block)

    return cap


def crooked_regions(vm: VmState, block: int) -> list[str]:
    """The regions of the device-memory area that do not start and end on a ``block``
    boundary. QEMU places a new DIMM in the first room it finds, aligned only to its
    backend's pages (``memory_device_get_free_addr``, hw/mem/memory-device.c), so after
    such a region it starts off a block, and Linux refuses it ("unaligned hotplug range",
    ``check_hotplug_memory_range``, mm/memory_hotplug.c) while ACPI still reports the
    insert as a success (``_OST`` status 0: measured on the test guest). The area itself
    starts on a GiB boundary on every machine Kata uses (x86 ``pc_memory_init``, arm
    ``virt``, ppc64 ``spapr``), so with no crooked region a DIMM of whole blocks lands
    on a block."""
    return [
        f"{what} at {start:#x} ({fmt_bytes(size)})"
        for what, start, size in vm.regions()
        if start % block or (start + size) % block
    ]


_COUNTED = re.compile(rf"(?:{DIMM_PREFIX}|{MEMDEV_PREFIX})([0-9]{{1,9}})")


def _new_ids(vm: VmState) -> Iterator[tuple[str, str]]:
    """Ids for new DIMMs and their backend objects (``kmdimm<N>``, ``kmmem<N>``): a counter
    past the highest in the VM, skipping any id the VM uses, whoever made it."""
    taken = vm.taken_ids
    counted = (_COUNTED.fullmatch(i) for i in taken)
    index = max((int(m.group(1)) for m in counted if m), default=-1) + 1
    while True:
        dimm, memdev = f"{DIMM_PREFIX}{index}", f"{MEMDEV_PREFIX}{index}"
        if dimm not in taken and memdev not in taken:
            yield dimm, (memdev if vm.backend_objects else "")
        index += 1


def grow_dimm(
    vm: VmState, target: int, block: int, clamp: ClampFn, cap: Cap = None
) -> tuple[tuple[Step, ...], int]:
    """One DIMM per step, each at most 48x the current guest memory (Kata #4847), each
    whole blocks placed on a block; none when QEMU would place it off a block
    (:func:`crooked_regions`)."""
    steps: list[Step] = []
    total = vm.total
    crooked = crooked_regions(vm, block)
    if crooked:
        clamp(
            "alignment",
            total,
            f"no DIMM can be plugged: {', '.join(crooked)} does not start and end on a "
            f"{fmt_bytes(block)} block, so QEMU would place the next DIMM off a block, which "
            "the guest refuses (while its ACPI reports success); remove that device, or use "
            "virtio-mem",
        )
        return (), total
    free_slots = vm.slots - len(vm.dimms)
    free_space = None if vm.device_space is None else vm.device_space - vm.space_used
    ids = _new_ids(vm)
    while total < target:
        if free_slots <= 0:
            clamp(
                "slots",
                total,
                f"no free DIMM slot left ({vm.slots} in all): stops at {fmt_bytes(total)}",
            )
            break
        # At least one block, so that even a tiny guest makes progress.
        size = min(target - total, max(align_down(ACPI_HOTPLUG_FACTOR * total, block), block))
        if cap is not None:
            room = cap(total)
            if room <= 0:
                clamp("guest_memmap", total, _stuck_text(total, block))
                break
            size = min(size, room)
        if free_space is not None and size > free_space:
            size = max(align_down(free_space, block), 0)
            clamp(
                "device_space",
                total + size,
                f"QEMU device-memory space ({fmt_bytes(vm.device_space or 0)}) runs out: "
                f"stops at {fmt_bytes(total + size)}",
            )
            if size <= 0:
                break
            target = total + size
        total += size
        dimm, memdev = next(ids)
        steps.append(Step("plug_dimm", dimm, size, size, total, memdev))
        free_slots -= 1
        if free_space is not None:
            free_space -= size
    return tuple(steps), total


def shrink_dimm(vm: VmState, target: int, clamp: ClampFn) -> tuple[tuple[Step, ...], int]:
    """Whole DIMMs, newest first, each no larger than what is left to remove.

    Only DIMMs kata-mem's journal proves it plugged (``ours``) and whose unplug is not
    already pending qualify; what cannot be removed in whole DIMMs stays (the target
    ends above the request).
    """
    steps: list[Step] = []
    total = vm.total
    candidates = [d for d in vm.dimms if d.ours and not d.pending_unplug]
    candidates.sort(key=lambda d: (d.slot if d.slot is not None else -1, d.id), reverse=True)
    for dimm in candidates:
        if total - dimm.size >= target:
            total -= dimm.size
            steps.append(Step("unplug_dimm", dimm.id, dimm.size, -dimm.size, total, dimm.memdev))
    if total > target:
        clamp(
            "alignment",
            total,
            f"whole DIMMs only: shrinks to {fmt_bytes(total)} instead of {fmt_bytes(target)}",
        )
    return tuple(steps), total


def _stuck_text(total: int, block: int) -> str:
    return (
        f"the guest cannot describe one more {fmt_bytes(block)} block at {fmt_bytes(total)}: "
        "its kernel-zone memory, less the headroom, holds no more struct pages; stops there"
    )


def resize_virtio_mem(
    cfg: SizingConfig,
    vm: VmState,
    target: int,
    block: int,
    clamp: ClampFn,
    cap: Cap = None,
) -> tuple[tuple[Step, ...], int]:
    """Growth in ``requested-size`` changes, each within what the guest can describe
    then (one change where nothing bounds it); shrink in bounded, block-aligned steps."""
    dev = vm.virtio_mem
    if dev is None:
        found = ", ".join(d.id for d in vm.virtio_mems)
        clamp(
            "device_space",
            vm.total,
            f"the VM has virtio-mem devices {found}, none of them Kata's {KATA_VIRTIO_MEM_ID}: "
            "kata-mem cannot tell which is the sandbox's, and resizes none"
            if found
            else "no virtio-mem device in the VM: nothing can be resized",
        )
        return (), vm.total
    others = vm.plugged - dev.size
    want = target - vm.base - others
    if want > dev.max_size:
        want = align_down(dev.max_size, block)
        clamp(
            "device_space",
            vm.base + others + want,
            f"the virtio-mem device holds at most {fmt_bytes(dev.max_size)}: "
            f"stops at {fmt_bytes(vm.base + others + want)}",
        )
    want = max(want, 0)
    if want >= dev.size:
        grown: list[Step] = []
        size = dev.size
        while size < want:
            new = want
            if cap is not None:
                room = cap(vm.base + others + size)
                if room <= 0:
                    clamp(
                        "guest_memmap",
                        vm.base + others + size,
                        _stuck_text(vm.base + others + size, block),
                    )
                    break
                new = min(want, size + room)
            grown.append(Step("resize_virtio_mem", dev.id, new, new - size, vm.base + others + new))
            size = new
        return tuple(grown), vm.base + others + size
    bound = max(
        align_down(
            max(cfg.settings.shrink_step_min, dev.size * cfg.settings.shrink_step_percent // 100),
            block,
        ),
        block,
    )
    steps: list[Step] = []
    size = dev.size
    while size > want:
        new = max(want, size - bound)
        steps.append(Step("resize_virtio_mem", dev.id, new, new - size, vm.base + others + new))
        size = new
    return tuple(steps), vm.base + others + want
