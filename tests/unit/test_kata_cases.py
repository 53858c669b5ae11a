"""kata-mem against Kata's Go runtime's own answers, recorded
(tests/fixtures/kata-cases/go-runtime.json; its schema: tests/fixtures/schemas/
kata-go.schema.json; how they were recorded: its ``provenance`` and
docs/contributing/tests.md, "Executed against Kata, or re-read"): the configuration
loading with drop-ins, the CRI sandbox sizing, a sandbox's per-pod annotations and static
sizing. Every field of Kata's answer must be kata-mem's, but for the differences
docs/design/compared-with-kata.md names (tests/support/kata_oracle.py ``DOCUMENTED``).

Kata's code does not run here: its answers were executed once and recorded, since the
suite cannot fetch Kata's Go module (the module proxy refuses it). The cases are compared
a kind at a time (each packaged configuration, generated configurations, sandboxes), and a
failure lists every case that differs, by id, with what its row says it is."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.support.cases import load_cases
from tests.support.kata_oracle import (
    DOCUMENTED,
    MORE_CONFIGS,
    differences,
    documented,
    kata_mem_answer,
)
from tests.support.paths import FIXTURES, KATA_CONFIGS, doc

TABLE = FIXTURES / "kata-cases" / "go-runtime.json"
MEMORY_MIB = json.loads(TABLE.read_text())["provenance"]["host"]["memory_mib"]
KINDS = ("packaged", "config", "sandbox")


@functools.cache
def _cases() -> tuple[dict[str, Any], ...]:
    return tuple(load_cases("kata-go"))


def _kind(case: dict[str, Any]) -> str:
    return str(case["id"]).split("-", 1)[0]


@functools.cache
def _answers(kind: str) -> dict[str, dict[str, Any]]:
    """kata-mem's answer to every case of ``kind``, computed once a process."""
    with tempfile.TemporaryDirectory() as where:
        return {
            case["id"]: kata_mem_answer(case, Path(where), MEMORY_MIB)
            for case in _cases()
            if _kind(case) == kind
        }


def test_every_case_is_of_a_kind() -> None:
    assert {_kind(case) for case in _cases()} == set(KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_kata_mem_answers_as_katas_go_runtime(kind: str) -> None:
    answers = _answers(kind)
    unsaid = [
        f"{case['id']} ({case['why']}): {d}"
        for case in _cases()
        if _kind(case) == kind
        for d in differences(case["expect"], answers[case["id"]])
        if documented(case, d) is None
    ]
    assert not unsaid, f"{len(unsaid)} differences no row documents:\n" + "\n".join(unsaid)


def test_every_documented_difference_is_a_row_of_the_comparison_and_still_met() -> None:
    """A documented difference that no recorded case meets any more is one kata-mem no
    longer has: its row, and its entry here, go."""
    page = doc("design/compared-with-kata.md")
    rows = [line.split("|")[1].strip() for line in page.splitlines() if line.startswith("| ")]
    for entry in DOCUMENTED:
        assert any(row.startswith(entry.topic) for row in rows), entry.topic
    met = {
        documented(case, d)
        for case in _cases()
        for d in differences(case["expect"], _answers(_kind(case))[case["id"]])
    }
    assert {d.topic for d in DOCUMENTED} == {d.topic for d in met if d is not None}


def test_the_packaged_configurations_are_all_recorded() -> None:
    """The nine kata-mem loads everywhere, and the Go runtime's others."""
    fixtures = {f.get("fixture") for c in _cases() for f in c["files"]}
    for where in (KATA_CONFIGS, MORE_CONFIGS):
        assert fixtures >= {p.name for p in where.glob("*.toml")}, where
