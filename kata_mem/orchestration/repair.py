"""Crash repair: make the intent record match the hypervisor, and undo what a
crash or a timeout left half done. Runs first on every call, under the lock.

The hypervisor is the truth; the record says what was in flight and what kata-mem
created (``owned``), which is the only proof that a device or object is its own:

- a DIMM whose unplug was sent (phase ``issued``) and is still there is pending:
  it stays counted as plugged until the guest lets it go;
- an orphaned backend object (one kata-mem created, at the recorded size, whose
  DIMM is gone) is deleted, by a ``delete_memdev`` step;
- a virtio-mem ``requested-size`` left below the plugged size is raised to it,
  or the guest would go on unplugging by itself, unseen;
- a virtio-mem ``requested-size`` above the plugged size (a grow still plugging) is
  waited for, so that the call plans, and measures its own grow, from where it ends;
- what is named like kata-mem's but not recorded as its own is reported, and left alone.

Repair steps are journaled and waited for like any other (``run``).
"""

from __future__ import annotations

from collections.abc import Callable

from kata_mem.backends import Backend, StepProgress
from kata_mem.core.model import Note, Step, VmState
from kata_mem.core.record import Record
from kata_mem.core.reports import owned_view, still_owned
from kata_mem.core.units import fmt_bytes
from kata_mem.core.values import replace
from kata_mem.edges.journal import SandboxState


def unproven_note(vm: VmState, legacy: bool) -> Note:
    """What a call says about look-alikes it leaves alone (``vm.unproven``), and why."""
    why = (
        "the journal was written by an older kata-mem, which did not record the devices it created"
        if legacy
        else "kata-mem's journal does not record creating them"
    )
    return Note(
        "left_alone",
        f"left alone: {', '.join(vm.unproven)} {'is' if len(vm.unproven) == 1 else 'are'} named "
        f"like kata-mem's but not provably its own ({why}); kata-mem never unplugs or deletes "
        "them. If they should go, remove them by hand (QMP device_del, then object-del of the "
        "backend object; or virsh detach-device)",
    )


def repair(
    backend: Backend,
    state: SandboxState,
    record: Record,
    run: Callable[[Step], object],
    note: Callable[[Note], None],
    wait: Callable[[Step], StepProgress] = lambda _step: StepProgress("done"),
) -> tuple[VmState, Record]:
    """Repair what the previous call left, and return the VM observed after it, with
    DIMMs whose unplug is pending marked so, and the record as it was written.

    ``run`` journals, issues and waits for one step; ``wait`` only waits for one (a
    step the hypervisor is already carrying out), and says where it stood when the wait
    ended; ``note`` reports what was repaired
    (as ``reconciled: ...`` warnings).
    """
    vm = owned_view(backend.observe(), record.owned)
    pending = record.pending_unplug
    if record.state == "running" and record.step is not None:
        step = record.step
        note(
            Note(
                "reconciled",
                f"reconciled: the previous call stopped during {step.action} {step.device} "
                f"({record.phase or 'phase unknown'})",
            )
        )
        dev = vm.device(step.device)
        if step.action == "unplug_dimm" and record.phase == "issued" and dev and dev.ours:
            pending = (*pending, step.device)
    made = {o.memdev: o for o in record.owned}
    repairs = [
        (
            f"reconciled: deleting orphaned backend object {memdev} (kata-mem created it for "
            f"{made[memdev].id}, "
            + ("which is gone)" if made[memdev].confirmed else "whose plug did not finish)"),
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
        note(Note("reconciled", text))
        run(step)
    plugging = dev is not None and dev.requested > dev.size
    if dev is not None and plugging:
        # A grow the previous call did not see done (it was killed, or timed out), or the
        # hypervisor's report of it is behind the guest: libvirt's live <current> follows
        # QEMU's MEMORY_DEVICE_SIZE_CHANGE events, which QEMU sends at most one a second
        # (hw/virtio/virtio-mem-pci.c, ``virtio_mem_pci_size_change_notify``; the rate limit
        # in monitor/monitor.c, ``monitor_qapi_event_conf``). Planned from the size
        # seen now, the rest would be a grow of this call's, measured from a guest reading
        # that already shows it: the guest would never seem to take it (PlugTimeout).
        progress = wait(Step("resize_virtio_mem", dev.id, dev.requested, 0, vm.total))
        found = ""
        if progress.state == "pending":
            found = ", and it was still plugging after the wait"
        elif progress.state == "rejected":
            found = ", and the wait ended in an error"
        if found and progress.detail:
            found += f" ({progress.detail})"
        note(
            Note(
                "reconciled",
                f"reconciled: {dev.id} was still plugging (plugged {fmt_bytes(dev.size)}, "
                f"requested-size {fmt_bytes(dev.requested)}): waited for it{found}",
            )
        )
    if repairs or plugging:
        vm = owned_view(backend.observe(), record.owned)
    if vm.unproven:
        note(unproven_note(vm, record.legacy))
    ours = {d.id for d in vm.dimms if d.ours}
    waited = pending
    pending = tuple(dict.fromkeys(d for d in waited if d in ours))
    for dropped in sorted(set(waited) - set(pending)):
        note(
            Note(
                "reconciled",
                f"reconciled: pending unplug of {dropped} completed"
                if vm.device(dropped) is None
                else f"reconciled: {dropped} is no longer waited for as a pending unplug: it is "
                "not provably kata-mem's",
            )
        )
    owned = tuple(still_owned(vm, record.owned))
    changed = pending != record.pending_unplug or owned != record.owned
    if repairs or record.state != "idle" or changed:
        record = state.save(record.repaired(vm.total, pending, owned))
    marked = replace(
        vm,
        devices=tuple(
            replace(d, pending_unplug=True) if d.id in pending else d for d in vm.devices
        ),
    )
    return marked, record
