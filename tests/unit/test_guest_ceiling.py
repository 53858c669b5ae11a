"""The guest's own ceiling on ``apply``: a fresh reading of the guest's MemAvailable
lowers it, for the first step only; later steps are read again by the
executor. The arithmetic without a reading is in tests/fixtures/plan-cases/guest-memmap.json."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kata_mem.core.errors import ConfigError
from kata_mem.core.model import Container, HostFacts, SizingConfig, Workload
from kata_mem.core.plan import plan
from kata_mem.core.units import GiB, MiB

HOST = HostFacts(memory=64 * GiB, cpus=4, arch="amd64")
FORTY = Workload((Container("c", memory_limit=40 * GiB),))
MOVABLE = "memhp_default_state=online_movable"


def test_a_reading_below_the_estimate_lowers_the_movable_ceiling(
    make_config: Callable[..., SizingConfig],
) -> None:
    """512 MiB booted, MemAvailable 200 MiB (below 3/4 x 512 = 384): (200 - 128) MiB of
    struct pages describe 72 x 64 = 4608 MiB: the plan stops at 5120."""
    cfg = make_config(default_memory=512, kernel_params=MOVABLE)
    m = plan(cfg, HOST, FORTY, guest_available=200 * MiB).memory
    assert m.target == 5120 * MiB
    assert [c.cause for c in m.clamps] == ["guest_memmap"]
    assert m.guest is not None and m.guest.reading == 200 * MiB
    assert "min(guest MemAvailable 200 MiB" in m.clamps[0].detail


def test_a_reading_above_the_estimate_does_not_raise_it(
    make_config: Callable[..., SizingConfig],
) -> None:
    """MemAvailable counts free ZONE_MOVABLE memory, which holds no struct page: a reading
    only ever lowers the estimate (3/4 x 512 - 128 = 256 MiB -> 16384 more)."""
    cfg = make_config(default_memory=512, kernel_params=MOVABLE)
    assert plan(cfg, HOST, FORTY, guest_available=4 * GiB).memory.target == 16896 * MiB


def test_the_reading_bounds_the_first_staged_step_only(
    make_config: Callable[..., SizingConfig],
) -> None:
    """Kernel onlining: the first step within what the reading allows (200 - 128 = 72 MiB
    -> 4608 MiB), the next from the estimate at 5120 MiB (3/4 x 5120 - 72 - 512 = 3256 MiB
    of room, far more than the 36352 MiB left): the whole 41472 in two DIMMs."""
    cfg = make_config(default_memory=512, kernel_params="memhp_default_state=online_kernel")
    m = plan(cfg, HOST, FORTY, guest_available=200 * MiB).memory
    assert [(s.size // MiB, s.total_after // MiB) for s in m.steps] == [
        (4608, 5120),
        (36352, 41472),
    ]
    assert m.clamps == ()


@pytest.mark.parametrize(
    ("keys", "named"),
    [
        ({"kernel_params": 5}, "[hypervisor.qemu] kernel_params"),
        ({"kata_mem": {"guest_onlining": "sideways"}}, "[kata_mem] guest_onlining"),
        ({"kata_mem": {"guest_memmap_on_memory": "yes"}}, "[kata_mem] guest_memmap_on_memory"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_key(
    make_config: Callable[..., SizingConfig], keys: dict[str, object], named: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        make_config(default_memory=512, **keys)
    assert named in refused.value.message
