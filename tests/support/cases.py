"""The case tables under ``tests/fixtures``: one loader, one JSON Schema per table.

A table is what one runner in ``tests/unit`` reads: a JSON file ``{"about": ..., "cases":
[...]}``, or a folder of them. ``tests/fixtures/schemas/TABLE.schema.json`` (Draft 2020-12;
``common.schema.json`` holds what the tables share) says which keys a case may hold and which
it must, and closes every object (``additionalProperties: false``), so that a misspelt key is
an error rather than a default, and a case that expects nothing is refused. The loader also
refuses what a schema cannot see: a key given twice in one object (JSON keeps the last one)
and two cases with one id. Every case is named by its ``id``.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional, Union

import jsonschema
import pytest
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from kata_mem.core.model import MemoryDevice, VmState
from kata_mem.core.units import GiB, MiB
from tests.support.paths import FIXTURES, REPO

SCHEMAS = FIXTURES / "schemas"
#: Each table: where its cases are, under tests/fixtures.
TABLES = {
    "plan": "plan-cases",
    "before-steps": "outcome-cases/before-steps.json",
    "after-steps": "outcome-cases/after-steps.json",
    "step-stopped": "outcome-cases/step-stopped.json",
    "check-step": "safety-cases/check-step.json",
    "under-pressure": "safety-cases/under-pressure.json",
    "hypervisor-annotations": "annotation-cases/hypervisor.json",
    "go-parsers": "annotation-cases/go-parsers.json",
    "runtimeclass": "runtimeclass-cases",
    "pod": "pod-cases",
}


class CaseFileError(Exception):
    """A case file that its table's schema, or the loader, refuses."""


def _registry() -> Registry[Any]:
    """Every schema under the name a ``$ref`` gives it: its file name."""
    return Registry().with_resources(
        (path.name, Resource.from_contents(json.loads(path.read_text()), DRAFT202012))
        for path in sorted(SCHEMAS.glob("*.schema.json"))
    )


class _Twice(dict):  # type: ignore[type-arg]
    """An object of a case file that gives ``key`` more than once."""

    def __init__(self, pairs: list[tuple[str, Any]], key: str) -> None:
        super().__init__(pairs)
        self.key = key


def _read(path: Path) -> Any:
    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        twice = sorted(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
        return _Twice(pairs, twice[0]) if twice else dict(pairs)

    try:
        doc = json.loads(path.read_text(), object_pairs_hook=pairs_hook)
    except json.JSONDecodeError as exc:
        raise CaseFileError(f"{_shown(path)}: not JSON: {exc}") from exc
    found = _twice(doc, [])
    if found is not None:
        at, key = found
        where = _where(doc, at)
        raise CaseFileError(
            f"{_shown(path)}: {where}: key {key!r} given twice (JSON keeps the last)"
        )
    return doc


def _twice(value: Any, at: list[Union[str, int]]) -> Optional[tuple[list[Union[str, int]], str]]:
    """Where the first object that gives a key twice is, and the key."""
    if isinstance(value, _Twice):
        return at, value.key
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for k, v in items:
        found = _twice(v, [*at, k])
        if found is not None:
            return found
    return None


def _shown(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _where(doc: Any, path: Sequence[Union[str, int]]) -> str:
    """Where ``path`` is in the file, as ``cases[3] (id 'x').expect.outcome``."""
    shown = ""
    for i, step in enumerate(path):
        shown += f"[{step}]" if isinstance(step, int) else f".{step}"
        if i == 1 and path[0] == "cases" and isinstance(step, int):
            case = doc["cases"][step]
            if isinstance(case, dict) and isinstance(case.get("id"), str):
                shown += f" (id {case['id']!r})"
    return shown.lstrip(".") or "the document"


def _order(error: jsonschema.ValidationError) -> list[tuple[int, int, str]]:
    """Errors in the order of the file: ``cases[2]`` before ``cases[10]``."""
    return [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in error.absolute_path]


def files_of(place: Path) -> list[Path]:
    """The case files of a table's place: a folder's ``*.json`` in name order, or the file."""
    return sorted(place.glob("*.json")) if place.is_dir() else [place]


def load_cases(table: str, where: Optional[Path] = None) -> list[dict[str, Any]]:
    """The cases of ``table``, from its files (``where``: another file or folder, for a
    test of the loader); every file checked against the table's schema first."""
    place = where or FIXTURES / TABLES[table]
    files = files_of(place)
    if not files:
        raise CaseFileError(f"{_shown(place)}: no case files")
    schema = json.loads((SCHEMAS / f"{table}.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema, registry=_registry())
    cases: list[dict[str, Any]] = []
    for path in files:
        doc = _read(path)
        errors = [jsonschema.exceptions.best_match([e]) for e in validator.iter_errors(doc)]
        if errors:
            raise CaseFileError(
                "\n".join(
                    f"{_shown(path)}: {_where(doc, list(e.absolute_path))}: {e.message}"
                    for e in sorted(errors, key=_order)
                )
            )
        cases += doc["cases"]
    twice = sorted(i for i, n in Counter(c["id"] for c in cases).items() if n > 1)
    if twice:
        raise CaseFileError(f"{_shown(place)}: case id {twice[0]!r} is used twice")
    return cases


def case_params(table: str) -> list[Any]:
    """The cases of ``table`` as pytest parameters, each named by its id."""
    return [pytest.param(case, id=case["id"]) for case in load_cases(table)]


def build_vm(spec: dict[str, Any]) -> VmState:
    """The VM a case describes (common.schema.json#/$defs/vm), with its defaults."""
    devices = tuple(
        MemoryDevice(
            id=d["id"],
            kind=d["kind"],
            size=d["size_mib"] * MiB,
            requested=d["size_mib"] * MiB,
            max_size=d.get("max_mib", d["size_mib"]) * MiB,
            block=d.get("block_mib", 0) * MiB,
            slot=d.get("slot"),
            pending_unplug=d.get("pending", False),
            memdev=d.get("memdev", ""),
            ours=d.get("ours", False),
            addr=None if d.get("addr_mib") is None else d["addr_mib"] * MiB,
        )
        for d in spec.get("devices", [])
    )
    return VmState(
        spec.get("base_mib", 512) * MiB,
        devices,
        spec.get("slots", 8),
        spec.get("device_space_mib", 15 * GiB // MiB) * MiB,
        other_ids=tuple(spec.get("other_ids", ())),
        unproven=tuple(spec.get("unproven", ())),
    )


def float32(number: Union[int, float]) -> float:
    """A case's number as Kata holds it: a float32 (the C conversion ``struct`` does, round
    to nearest, ties to even; written here apart from kata_mem's own rounding, which the
    cases check). The number is a float64 first, as a configuration file's is (BurntSushi
    toml reads a float64), and a case's decimals are chosen so that the two roundings agree."""
    return float(struct.unpack("f", struct.pack("f", number))[0])
