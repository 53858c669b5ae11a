"""The shrink-safety decision against its JSON case tables (tests/fixtures/safety-cases):
every branch of :func:`kata_mem.core.safety.check_step` and :func:`kata_mem.core.safety.under_pressure`;
what a case may hold: tests/fixtures/schemas/{check-step,under-pressure}.schema.json."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from kata_mem.core import safety
from kata_mem.core.model import GuestUsage, Settings
from kata_mem.core.units import MiB
from kata_mem.core.values import replace
from tests.support.cases import case_params

NOW = 1_000_000.0


def usage(spec: Optional[dict[str, Any]]) -> Optional[GuestUsage]:
    if spec is None:
        return None

    def mib(key: str) -> Optional[int]:
        value = spec[key]
        return None if value is None else int(value * MiB)

    age = spec["age_s"]
    return GuestUsage(
        total=mib("total"),
        available=mib("available"),
        free=mib("free"),
        disk_caches=mib("disk_caches"),
        major_faults=spec.get("major_faults"),
        last_update=None if age is None else NOW - age,
        observed_at=NOW,
    )


def settings(spec: dict[str, Any]) -> Settings:
    values = dict(spec)
    if "headroom_min_mib" in values:
        values["headroom_min"] = values.pop("headroom_min_mib") * MiB
    return replace(Settings(), **values)


@pytest.mark.parametrize("case", case_params("check-step"))
def test_check_step(case: dict[str, Any]) -> None:
    verdict = safety.check_step(
        current_total=case["current_mib"] * MiB,
        after_total=case["after_mib"] * MiB,
        usage=usage(case["usage"]),
        settings=settings(case.get("settings", {})),
        block=case.get("block_mib", 128) * MiB,
        baseline=usage(case.get("baseline")),
        irreversible=case.get("irreversible", False),
    )
    expect = case["expect"]
    assert verdict.action == expect["action"], verdict.message
    assert verdict.reason == expect["reason"], verdict.message
    assert verdict.message


@pytest.mark.parametrize("case", case_params("under-pressure"))
def test_under_pressure(case: dict[str, Any]) -> None:
    reason = safety.under_pressure(
        usage(case["usage"]),
        settings(case.get("settings", {})),
        case.get("block_mib", 128) * MiB,
    )
    assert (reason is not None) == case["expect"]["pressure"], reason
