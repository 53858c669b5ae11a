"""The closed sets of strings kata-mem reports (statuses, reasons, clamp causes) are Literal
types in kata_mem.core.model, and the documentation states exactly those values."""

from __future__ import annotations

import re
from typing import get_args

from kata_mem.core.model import Cause, MemoryCause, Reason, SafetyReason, Status, VcpuCause
from tests.support.paths import doc

DOCS_TEXT = doc("design/safe-shrink.md") + doc("guide/sizing.md")


def _section(title: str) -> str:
    return DOCS_TEXT.split(title, 1)[1].split("\n#", 1)[0]


def test_outcome_statuses_and_reasons_are_the_documented_ones() -> None:
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \|", _section("## Outcomes"), re.MULTILINE)
    statuses = {status for status, _ in rows}
    reasons = {"", *(r for _, cell in rows for r in re.findall(r"`(\w+)`", cell))}
    assert statuses == set(get_args(Status))
    assert reasons == set(get_args(Reason))
    assert set(get_args(SafetyReason)) <= reasons


def test_clamp_causes_are_the_documented_ones() -> None:
    text = DOCS_TEXT.split("Clamp causes: ", 1)[1].split("\n\n", 1)[0]
    memory, vcpus = text.split("(memory)")
    assert re.findall(r"`(\w+)`", memory) == list(get_args(MemoryCause))
    assert re.findall(r"`(\w+)`", vcpus) == list(get_args(VcpuCause))
    assert set(get_args(Cause)) == {*get_args(MemoryCause), *get_args(VcpuCause)}
