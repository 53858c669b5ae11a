"""The shrink-safety decision: may this shrink step run now? A pure function.

KEP-1287's memory-decrease rule, made stronger: the kubelet skips a decrease
when usage is above the new limit; here every *step* of a shrink must leave the
guest its unreclaimable usage plus a headroom, measured with fresh statistics,
and a reading that is missing or stale is "unknown" (Deferred), never zero and
never Infeasible.

All sizes are the guest's own (balloon statistics), because the kernel keeps
part of boot memory that never shows in MemTotal::

    guest_total_after = MemTotal - (memory the step removes)
    usage             = MemTotal - MemFree                 (everything in use)
    reclaimable       = min(disk caches, MemAvailable - MemFree)   (conservative)
    headroom          = max(headroom_min, one block, headroom_percent of the step's target)
    run only if       guest_total_after >= (usage - reclaimable) + headroom

A step that cannot be given back (a DIMM unplug: there is no way to cancel an ACPI eject)
must also leave room for what ``usage - reclaimable`` rose by since the shrink began. The
guest offlines the DIMM's memory by migrating what is in it; if the workload grows
meanwhile, the migration finds no room and the guest's offlining retries forever
(mm/memory_hotplug.c, ``offline_pages``: a failed migration is retried, "TODO: fatal
migration failures should bail out"; only a pending signal stops it, and the kernel worker
that handles the ACPI eject gets none) with the memory it isolated lost to the guest. A
workload that grew by that much during the shrink may well grow by as much during the eject;
a virtio-mem step is watched and given back instead (:func:`under_pressure`).
"""

from __future__ import annotations

from typing import Literal, Optional

from kata_mem.core.model import GuestUsage, SafetyReason, Settings
from kata_mem.core.units import fmt_bytes, to_mib_nearest
from kata_mem.core.values import Frozen

Action = Literal["run", "defer"]
#: Major page faults since the shrink began that count as pressure: the guest is
#: reading back from disk what it no longer has room to cache.
MAJOR_FAULTS_PRESSURE = 1000


class Verdict(Frozen):
    """Run the step, or defer it with a reason code and a message for people."""

    action: Action
    reason: SafetyReason
    message: str


def headroom(settings: Settings, block: int, target_total: int) -> int:
    """Memory a shrink must leave free: max(floor, one block, percent of the target)."""
    return max(settings.headroom_min, block, target_total * settings.headroom_percent // 100)


def check_step(
    *,
    current_total: int,
    after_total: int,
    usage: Optional[GuestUsage],
    settings: Settings,
    block: int,
    baseline: Optional[GuestUsage] = None,
    irreversible: bool = False,
) -> Verdict:
    """Decide whether a shrink step from ``current_total`` to ``after_total`` may run.

    ``baseline`` is the reading taken before the shrink began; a rise in major
    page faults since then is pressure (the guest is refaulting what it lost).
    ``irreversible``: the step cannot be given back (a DIMM unplug), so the rise in
    unreclaimable usage since ``baseline`` must fit too.
    """
    if usage is None:
        return Verdict(
            "defer",
            "UsageUnknown",
            "no guest memory statistics (no balloon, or the guest does not report)",
        )
    age = usage.age
    if age is None:
        return Verdict("defer", "UsageUnknown", "the guest has not reported memory statistics yet")
    if age > settings.usage_max_age_s:
        return Verdict(
            "defer",
            "UsageUnknown",
            f"guest statistics are {age:.1f} s old (more than {settings.usage_max_age_s:g} s): usage unknown",
        )
    if usage.total is None or usage.free is None or usage.available is None:
        return Verdict(
            "defer", "UsageUnknown", "the guest does not report total, free and available memory"
        )
    faults = (
        None
        if baseline is None or baseline.major_faults is None or usage.major_faults is None
        else usage.major_faults - baseline.major_faults
    )
    if faults is not None and faults > MAJOR_FAULTS_PRESSURE:
        return Verdict(
            "defer", "GuestPressure", f"the guest took {faults} major page faults during the shrink"
        )
    removed = max(current_total - after_total, 0)
    used = usage.total - usage.free
    reclaimable = usage.reclaimable
    room = headroom(settings, block, after_total)
    guest_after = usage.total - removed
    rise = max(used - reclaimable - _unreclaimable(baseline), 0) if irreversible else 0
    need = used - reclaimable + room + rise
    rose = (
        f", and the rise of {_about(rise)} in its usage since the shrink began, as the step "
        "cannot be given back"
        if rise
        else ""
    )
    detail = (
        f"guest usage {_about(used)}, reclaimable {_about(reclaimable)}, "
        f"headroom {_about(room)}{rose}: needs {_about(need)}, "
        f"the step would leave {_about(guest_after)} (target {fmt_bytes(after_total)})"
    )
    if guest_after < need:
        return Verdict("defer", "UsageAboveTarget", f"shrink deferred: {detail}")
    return Verdict("run", "", detail)


def _unreclaimable(baseline: Optional[GuestUsage]) -> int:
    """``usage - reclaimable`` of the reading before the shrink began; with no such reading,
    as high as a usage can be (so that no rise is counted)."""
    if baseline is None or baseline.total is None or baseline.free is None:
        return 1 << 64
    return baseline.total - baseline.free - baseline.reclaimable


def under_pressure(usage: Optional[GuestUsage], settings: Settings, block: int) -> Optional[str]:
    """A reason to revert now, or None: the guest's reclaimable-adjusted free memory
    fell below the headroom floor during a step."""
    if usage is None or usage.total is None or usage.free is None or usage.available is None:
        return None
    spare = usage.free + usage.reclaimable
    floor = max(settings.headroom_min, block)
    if spare < floor:
        return f"guest free memory {_about(spare)} fell below the headroom floor {fmt_bytes(floor)}"
    return None


def _about(n: int) -> str:
    """A size for messages, to the nearest MiB (the decision itself uses exact bytes)."""
    return f"{to_mib_nearest(n)} MiB"
