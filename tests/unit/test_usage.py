"""Which guest usage reading a shrink step is judged on (kata_mem.orchestration.usage), on a
balloon that reports as QEMU's does: each reading shows the guest when it was made, not when
it is read, and its last-update is stamped in whole seconds, so a reading made after a step
may carry a stamp from before it."""

from __future__ import annotations

import math
from typing import Optional

from kata_mem.backends.fake import FakeBackend, VirtualTime
from kata_mem.core.model import GuestUsage, MemoryDevice, Settings, VmState
from kata_mem.core.safety import under_pressure
from kata_mem.core.units import MiB
from kata_mem.core.values import replace
from kata_mem.orchestration.usage import UsageReader

BLOCK = 2 * MiB
SETTINGS = Settings()  # statistics older than 5 s are unknown; headroom at least 128 MiB


def vm(total_mib: int) -> VmState:
    plugged = (total_mib - 512) * MiB
    dev = MemoryDevice("vm0", "virtio-mem", plugged, plugged, 2048 * MiB, BLOCK)
    return VmState(512 * MiB, (dev,))


class Balloon(FakeBackend):
    """The guest's balloon statistics: ``(made_at, total_mib, used_mib)``, in time order.
    Reading them gives the last one made by now (none before the first)."""

    def __init__(self, time: VirtualTime, *readings: tuple[float, int, int]) -> None:
        super().__init__(vm(1536), clock=time.clock, sleep=time.sleep)
        self.readings = readings

    def guest_usage(self) -> Optional[GuestUsage]:
        now = self.clock()
        made = [r for r in self.readings if r[0] <= now]
        if not made:
            return None
        at, total, used = made[-1]
        return GuestUsage(
            total=total * MiB,
            available=(total - used) * MiB,
            free=(total - used) * MiB,
            disk_caches=0,
            major_faults=0,
            last_update=float(math.floor(at)),
            observed_at=now,
        )


def reader_at(
    start: float, *readings: tuple[float, int, int], interval_s: int = 1
) -> tuple[UsageReader, VirtualTime]:
    time = VirtualTime(start)
    settings = replace(SETTINGS, stats_interval_s=interval_s)
    return UsageReader(Balloon(time, *readings), settings, time.clock, time.sleep), time


def test_a_reading_that_may_predate_the_last_step_counts_the_memory_it_removed() -> None:
    # Step 1 took the VM from 1536 to 1280 MiB at 101.3; the latest reading was made at 100.
    # Judged as if it showed 1280 MiB it would leave 1536 - 256 = 1280 >= 950 + 128 and let
    # step 2 run; as the VM was when it was made, step 2 leaves 1024 MiB, short of 1078.
    reader, time = reader_at(100.0, (100.0, 1536, 950), (102.5, 1280, 950))
    time.now = 101.3
    reader.step_done(1536 * MiB)
    verdict, usage = reader.check(vm(1280), 1024 * MiB, BLOCK, None)
    assert (verdict.action, verdict.reason) == ("defer", "UsageAboveTarget"), verdict.message
    # Deferred only on a reading that shows the step (made at 102.5, stamped 102).
    assert usage is not None and usage.total == 1280 * MiB and usage.last_update == 102.0


def test_a_reading_that_shows_the_last_step_is_judged_with_the_vms_size_now() -> None:
    # The reading made before step 2's check predates step 1 and says defer (1024 < 1100 +
    # 128); the one awaited after it shows 1280 MiB with 800 used: 1280 - 256 = 1024 >= 928.
    reader, time = reader_at(100.0, (100.0, 1536, 1100), (102.5, 1280, 800))
    time.now = 101.3
    reader.step_done(1536 * MiB)
    verdict, usage = reader.check(vm(1280), 1024 * MiB, BLOCK, None)
    assert (verdict.action, verdict.reason) == ("run", ""), verdict.message
    assert usage is not None and usage.total == 1280 * MiB


def test_a_shrink_is_deferred_only_on_a_reading_made_during_the_call() -> None:
    # 2 s old (fresh enough to run on) and from before the call, it says defer: the reading
    # made since says the guest has room, and that one decides.
    reader, _ = reader_at(100.0, (98.0, 1536, 1400), (100.6, 1536, 600))
    verdict, usage = reader.check(vm(1536), 1280 * MiB, BLOCK, None)
    assert (verdict.action, verdict.reason) == ("run", ""), verdict.message
    assert usage is not None and usage.last_update == 100.0


def test_a_fresh_reading_is_waited_for_as_long_as_whole_second_stamps_make_it_take() -> None:
    # Every 2 s at .9: the one made at 100.9 is stamped 100, before 100.5; the first stamped
    # at or after 100.5 is made at 102.9, more than one interval later.
    reader, time = reader_at(
        100.5, (98.9, 1536, 500), (100.9, 1536, 500), (102.9, 1536, 500), interval_s=2
    )
    usage = reader.fresh(after=100.5)
    assert usage is not None and usage.last_update == 102.0
    assert time.now < 103.5  # and no longer than it takes


def test_after_the_last_step_the_reading_awaited_shows_it() -> None:
    # The step to 1280 MiB ended at 101.2: the latest reading, made before it, shows 1036 MiB
    # free; the first one made after it, 80 MiB. That one is what the pressure check is for.
    reader, time = reader_at(100.0, (100.0, 1536, 500), (102.3, 1280, 1200))
    time.now = 101.2
    reader.step_done(1536 * MiB)
    usage = reader.since_last_step()
    assert usage is not None and usage.total == 1280 * MiB
    assert under_pressure(usage, SETTINGS, BLOCK) is not None
