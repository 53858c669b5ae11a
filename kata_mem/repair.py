"""Crash repair: make the intent record match the hypervisor, and undo what a
crash or a timeout left half done. Runs first on every call, under the lock.

The hypervisor is the truth; the record only says what was in flight:

- a DIMM whose unplug was sent (phase ``issued``) and is still there is pending:
  it stays counted as plugged until the guest lets it go;
- an orphaned backend object (``kmmem<N>`` without its DIMM) is deleted, by a
  ``delete_memdev`` step;
- a virtio-mem ``requested-size`` left below the plugged size is raised to it,
  or the guest would go on unplugging by itself, unseen.

Repair steps are journaled and waited for like any other (``run``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from kata_mem.backends import Backend
from kata_mem.journal import Record, SandboxState
from kata_mem.model import Step, VmState
from kata_mem.units import fmt_bytes, to_mib_floor


def repair(
    backend: Backend,
    state: SandboxState,
    record: Record,
    run: Callable[[Step], object],
    note: Callable[[str], None],
) -> VmState:
    """Repair what the previous call left, and return the VM observed after it,
    with DIMMs whose unplug is pending marked so.

    ``run`` journals, issues and waits for one step; ``note`` reports what was
    repaired (as ``reconciled: ...`` warnings).
    """
    vm = backend.observe()
    if record.state == "running" and record.step is not None:
        step = record.step
        note(
            f"reconciled: the previous call stopped during {step.action} {step.device} "
            f"({record.phase or 'phase unknown'})"
        )
        if step.action == "unplug_dimm" and record.phase == "issued" and vm.device(step.device):
            record.pending_unplug.append(step.device)
    repairs = [
        (
            f"reconciled: deleting orphaned backend object {memdev}",
            Step("delete_memdev", memdev, 0, 0, vm.total),
        )
        for memdev in vm.orphans
    ]
    dev = vm.virtio_mem
    if dev is not None and dev.requested < dev.size:
        repairs.append(
            (
                f"reconciled: {dev.id} requested-size raised from {fmt_bytes(dev.requested)} "
                f"to {fmt_bytes(dev.size)}",
                Step("resize_virtio_mem", dev.id, dev.size, 0, vm.total),
            )
        )
    for text, step in repairs:
        note(text)
        run(step)
    if repairs:
        vm = backend.observe()
    pending = [d for d in record.pending_unplug if vm.device(d) is not None]
    for gone in sorted(set(record.pending_unplug) - set(pending)):
        note(f"reconciled: pending unplug of {gone} completed")
    if repairs or record.state != "idle" or pending != record.pending_unplug:
        record.pending_unplug = pending
        record.state, record.step, record.phase = "idle", None, ""
        record.observed_mib = to_mib_floor(vm.total)
        state.save(record)
    return dataclasses.replace(
        vm,
        devices=tuple(
            dataclasses.replace(d, pending_unplug=True) if d.id in pending else d
            for d in vm.devices
        ),
    )
