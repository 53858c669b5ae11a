"""When a guest reading counts as fresh for a shrink step: a reading told
apart by the hypervisor's count of reports arrives within the same whole second, asked
for right after the step; and a DIMM unplug is a step the next check must see past."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from kata_mem.backends.fake import FakeBackend, FakeGuest, VirtualTime
from kata_mem.core.model import (
    Container,
    GuestUsage,
    Settings,
    SizingConfig,
    Step,
    VmState,
    Workload,
)
from kata_mem.core.units import GiB, MiB
from kata_mem.core.values import replace
from kata_mem.edges.journal import SandboxState
from kata_mem.orchestration.executor import Options, run_locked
from kata_mem.orchestration.usage import UsageReader
from tests.support.configs import GUEST_KERNEL_PARAMS, HOST


def no_dimms() -> VmState:
    return VmState(512 * MiB, (), slots=8, device_space=15 * GiB)


class Counted:
    """Readings stamped in whole seconds, as QEMU stamps them, and counted; asking
    (polling interval 0, then back) brings a new one only when ``answers``."""

    def __init__(self, clock: Callable[[], float], answers: bool = True) -> None:
        self.clock = clock
        self.answers = answers
        self.sequence = 7
        self.stamp = float(math.floor(clock()))
        self.intervals: list[int] = []

    def guest_usage(self) -> Optional[GuestUsage]:
        return GuestUsage(
            total=1024 * MiB,
            available=900 * MiB,
            free=900 * MiB,
            last_update=self.stamp,
            observed_at=self.clock(),
            sequence=self.sequence,
        )

    def read_and_ask(self, seconds: int) -> Optional[GuestUsage]:
        usage = self.guest_usage()  # read first, then asked, as QMP sends them in one exchange
        self.set_stats_interval(0)
        self.set_stats_interval(seconds)
        return usage

    def set_stats_interval(self, seconds: int) -> Optional[int]:
        before = self.intervals[-1] if self.intervals else 1
        self.intervals.append(seconds)
        if before == 0 and seconds and self.answers:
            self.sequence += 1  # QEMU polls at once; the guest answers within the second
        return before


def reader_after_a_step(backend: Counted, t: VirtualTime) -> UsageReader:
    reader = UsageReader(backend, Settings(), t.clock, t.sleep)  # type: ignore[arg-type]
    reader.step_done(1536 * MiB)
    return reader


def test_a_counted_reading_after_the_step_is_fresh_within_the_second() -> None:
    t = VirtualTime(1_000_000.25)
    backend = Counted(t.clock)
    reader = reader_after_a_step(backend, t)
    start = t.now
    usage = reader.since_last_step()
    assert usage is not None and usage.sequence == 8
    # Not the wait for a stamp from the next whole second (0.75 s away, then a poll).
    assert t.now - start < 0.1
    # Asked for by stopping the polling and putting it back: never left changed.
    assert backend.intervals == [0, 1]


def test_the_reading_looked_at_after_the_step_is_not_taken_for_a_new_one() -> None:
    t = VirtualTime(1_000_000.25)
    backend = Counted(t.clock, answers=False)
    reader = reader_after_a_step(backend, t)
    start = t.now
    usage = reader.since_last_step()
    # Same count, stamp before the step: waited for as long as a reading may take.
    assert usage is not None and usage.sequence == 7
    assert t.now - start >= 3 * Settings().stats_interval_s
    assert backend.intervals == [0, 1]


class Frozen(FakeBackend):
    """After ``freeze``, every reading is the one taken then (a reading that came while
    the first DIMM was still being unplugged), seen again and again."""

    frozen: Optional[GuestUsage] = None

    def guest_usage(self) -> Optional[GuestUsage]:
        if self.frozen is not None:
            return replace(self.frozen, observed_at=self.clock())
        return super().guest_usage()


def test_a_reading_from_before_a_dimm_unplug_is_not_judged_as_after_it(
    make_config: Callable[..., SizingConfig], tmp_path: Path
) -> None:
    # The fake guest gives its DIMMs back, as one onlining movable does.
    cfg = make_config(default_memory=512, default_maxmemory=8192, kernel_params=GUEST_KERNEL_PARAMS)
    b = Frozen(no_dimms(), FakeGuest(used=100 * MiB))

    def run(workload: Workload, **options: Any) -> Any:
        t = VirtualTime()
        b.clock, b.sleep = t.clock, t.sleep
        state = SandboxState(tmp_path / "state", "sb")
        return run_locked(
            state, lambda: b, cfg, HOST, workload, Options(**options), t.clock, t.sleep
        )

    for limits in ((512,), (512, 512)):  # kata-mem plugs two DIMMs of 512 MiB
        assert (
            run(
                Workload(tuple(Container(f"c{i}", n * MiB) for i, n in enumerate(limits)))
            ).outcome.status
            == "Resized"
        )
    # 300 MiB used: the whole shrink to 512 MiB is safe when it is checked.
    b.guest.used, b.guest.polls_to_complete = 300 * MiB, 1

    def allocate_during_the_first_unplug(backend: FakeBackend, step: Step) -> None:
        if step.action == "unplug_dimm" and b.frozen is None:
            b.guest.used = 450 * MiB
            b.frozen = FakeBackend.guest_usage(b)

    b.on_poll = allocate_during_the_first_unplug
    r = run(Workload(()), allow_shrink=True)
    # That reading shows 1536 MiB: after the first unplug it leaves 1024 MiB less, and
    # 512 MiB is short of 450 MiB used + 128 MiB headroom. Judged as if it showed the
    # 1024 MiB left after the first unplug, the second would run and leave 62 MiB free.
    assert (r.outcome.status, r.outcome.reason) == ("InProgress", "PartialShrink"), r.outcome
    assert len(r.outcome.steps) == 1 and b.state.total == 1024 * MiB
