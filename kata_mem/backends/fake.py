"""An in-memory hypervisor with a guest: the backend for ``--dry-run`` and unit tests.

It enforces what QEMU enforces (free slots, device-memory space, block
multiples, unknown and duplicate ids, backend objects in use) and what a Linux guest does (virtio-mem cannot unplug
memory the guest uses; a guest may refuse a DIMM eject or never answer), so the
executor's handling of each case can be tested without a VM.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Optional

from kata_mem.core.errors import BackendError
from kata_mem.core.model import GuestUsage, MemoryDevice, Step, VmState
from kata_mem.core.reports import StepProgress
from kata_mem.core.units import MiB, align_up, fmt_bytes
from kata_mem.core.values import replace

#: QEMU's memory-backend-ram alignment for a DIMM on x86-64.
DIMM_ALIGN = 2 * MiB


@dataclass
class FakeGuest:
    """The guest's behaviour. ``used`` is memory that cannot be reclaimed or moved;
    ``reserved`` is boot memory the kernel keeps that never shows in MemTotal.

    Tests change these between or during steps (``FakeBackend.on_poll``):
    ``caches`` is page cache the guest can drop, ``unreclaimable_caches`` is what
    the guest reports as cache but cannot drop (tmpfs, shmem: part of ``used``,
    reported in ``disk_caches`` but not in MemAvailable), ``major_faults`` the
    guest's counter of major page faults."""

    used: int = 256 * MiB
    reserved: int = 0
    caches: int = 0
    unreclaimable_caches: int = 0
    major_faults: int = 0
    refuse_unplug: set[str] = field(default_factory=set)
    confirm: bool = True
    polls_to_complete: int = 0
    stats: bool = True
    stats_age_s: float = 0.0
    #: The balloon's statistics polling interval (seconds; 0: off, as QEMU starts it).
    stats_interval: int = 0
    #: How much hot-added memory the guest has onlined (its MemTotal shows); None: all
    #: of it at once. A guest still onlining, or one that died after a plug, shows less.
    onlined: Optional[int] = None


class FakeBackend:
    """Implements :class:`~kata_mem.backends.Backend` in memory."""

    def __init__(
        self,
        state: VmState,
        guest: Optional[FakeGuest] = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        vmm_pid: Optional[int] = None,
    ) -> None:
        self.state = state
        #: The VMM process a test pretends the VM runs in; None reports ``state.vmm_pid``.
        self.vmm_pid = vmm_pid
        self.guest = guest or FakeGuest()
        self.clock = clock
        self.sleep = sleep
        self.calls: list[str] = []
        self._pending: dict[str, int] = {}
        self.closed = False
        #: Called with the backend and the step on every poll, before the guest
        #: answers: how a test makes the guest allocate or fault during a step.
        self.on_poll: Optional[Callable[[FakeBackend, Step], None]] = None

    # -- the Backend protocol ------------------------------------------------

    def observe(self) -> VmState:
        self.calls.append("observe")
        if self.vmm_pid is None:
            return self.state
        return replace(self.state, vmm_pid=self.vmm_pid)

    def begin(self, step: Step) -> None:
        self.calls.append(f"{step.action} {step.device} {fmt_bytes(step.size)}")
        if step.action == "plug_dimm":
            self._check_plug(step)
            memdev = step.memdev
            used_slots = {d.slot for d in self.state.dimms}
            slot = next(i for i in range(self.state.slots) if i not in used_slots)
            self._pending[step.device] = self.guest.polls_to_complete
            self._set_devices(
                (
                    *self.state.devices,
                    MemoryDevice(
                        step.device,
                        "dimm",
                        step.size,
                        step.size,
                        step.size,
                        slot=slot,
                        memdev=memdev,
                    ),
                )
            )
        elif step.action == "unplug_dimm":
            dev = self.state.device(step.device)
            if dev is None or dev.kind != "dimm":
                raise BackendError(f"Device '{step.device}' not found", "DeviceNotFound")
            self._pending[step.device] = self.guest.polls_to_complete
        elif step.action == "delete_memdev":
            if any(d.memdev == step.device for d in self.state.devices):
                raise BackendError(
                    f"object '{step.device}' is in use, can not be deleted", "GenericError"
                )
            if step.device not in {o.id for o in self.state.loose}:
                raise BackendError(f"object '{step.device}' not found", "GenericError")
            self.state = replace(
                self.state, loose=tuple(o for o in self.state.loose if o.id != step.device)
            )
        else:
            dev = self.state.device(step.device)
            if dev is None or dev.kind != "virtio-mem":
                raise BackendError(f"Device '{step.device}' not found", "DeviceNotFound")
            if dev.block and step.size % dev.block:
                raise BackendError(
                    f"'requested-size' has to be multiples of 'block-size' (0x{dev.block:x})",
                    "GenericError",
                )
            if step.size > dev.max_size:
                raise BackendError(
                    f"'requested-size' cannot exceed the memory backend size(0x{dev.max_size:x})",
                    "GenericError",
                )
            self._replace(replace(dev, requested=step.size))
            self._pending[step.device] = self.guest.polls_to_complete

    def poll(self, step: Step, wait_s: float = 0.0) -> StepProgress:
        progress = self._progress(step)
        if progress.state == "pending":
            self.sleep(wait_s)
        return progress

    def _progress(self, step: Step) -> StepProgress:
        self.calls.append(f"poll {step.device}")
        if self.on_poll is not None:
            self.on_poll(self, step)
        if not self.guest.confirm:
            return StepProgress("pending", "the guest has not answered")
        if step.action == "delete_memdev":
            loose = {o.id for o in self.state.loose}
            return StepProgress("pending" if step.device in loose else "done")
        left = self._pending.get(step.device, 0)
        if left > 0:
            self._pending[step.device] = left - 1
            return StepProgress("pending")
        dev = self.state.device(step.device)
        if step.action == "plug_dimm":
            return StepProgress("done" if dev is not None else "rejected")
        if step.action == "unplug_dimm":
            if dev is None:
                return StepProgress("done")
            if step.device in self.guest.refuse_unplug:
                return StepProgress("rejected", "DEVICE_UNPLUG_GUEST_ERROR")
            if self.state.total - self.guest.reserved - dev.size < self.guest.used:
                return StepProgress("pending", "the guest cannot offline memory it uses")
            self._set_devices(tuple(d for d in self.state.devices if d.id != step.device))
            return StepProgress("done")
        assert dev is not None
        # The driver plugs at once; it unplugs only blocks the guest does not use.
        floor = max(self.guest.used + self.guest.reserved - (self.state.total - dev.size), 0)
        size = max(dev.requested, align_up(floor, dev.block or 1))
        self._replace(replace(dev, size=min(size, dev.max_size)))
        return StepProgress(
            "done" if size == dev.requested else "pending", f"size {fmt_bytes(size)}"
        )

    def guest_usage(self) -> Optional[GuestUsage]:
        if not self.guest.stats:
            return None
        now = self.clock()
        total = self.state.total - self.guest.reserved
        if self.guest.onlined is not None:
            total = min(total, self.state.base + self.guest.onlined - self.guest.reserved)
        available = max(total - self.guest.used, 0)
        return GuestUsage(
            total=total,
            available=available,
            free=max(available - self.guest.caches, 0),
            disk_caches=self.guest.caches + self.guest.unreclaimable_caches,
            major_faults=self.guest.major_faults,
            last_update=now - self.guest.stats_age_s,
            observed_at=now,
        )

    def read_and_ask(self, seconds: int) -> Optional[GuestUsage]:
        # Its readings are not counted (no sequence), as libvirt's: nothing is asked for.
        return self.guest_usage()

    def set_stats_interval(self, seconds: int) -> Optional[int]:
        if not self.guest.stats:
            return None
        before, self.guest.stats_interval = self.guest.stats_interval, seconds
        return before

    def close(self) -> None:
        self.closed = True

    # -- helpers -------------------------------------------------------------

    def _check_plug(self, step: Step) -> None:
        if step.memdev in self.state.taken_ids:
            raise BackendError(
                f"attempt to add duplicate property '{step.memdev}' to object (type 'container')",
                "GenericError",
            )
        if step.device in self.state.taken_ids:
            raise BackendError(f"Duplicate device ID '{step.device}'", "GenericError")
        if len(self.state.dimms) >= self.state.slots:
            raise BackendError("no free slots available", "GenericError")
        if step.size % DIMM_ALIGN:
            raise BackendError(
                f"backend memory size must be multiple of 0x{DIMM_ALIGN:x}", "GenericError"
            )
        used = self.state.space_used
        if self.state.device_space is not None and used + step.size > self.state.device_space:
            raise BackendError(
                f"not enough space, currently 0x{used:x} in use of total space for memory devices 0x{self.state.device_space:x}",
                "GenericError",
            )

    def _set_devices(self, devices: tuple[MemoryDevice, ...]) -> None:
        self.state = replace(self.state, devices=devices)

    def _replace(self, dev: MemoryDevice) -> None:
        self._set_devices(tuple(dev if d.id == dev.id else d for d in self.state.devices))


class VirtualTime:
    """A clock that only moves when something sleeps: dry runs and tests never wait."""

    def __init__(self, start: Optional[float] = None) -> None:
        self.now = time.time() if start is None else start

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.001)
