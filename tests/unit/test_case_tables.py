"""The case loader (tests/support/cases.py) and the schemas of the case tables: a case
file that says something its table does not know, or expects nothing, is refused, never
read with a default in its place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support.cases import SCHEMAS, TABLES, CaseFileError, files_of, load_cases
from tests.support.paths import FIXTURES

#: An after-steps case, as its schema wants it.
VERIFIED = {"status": "Resized", "reason": "", "message": "(verified)"}
RESIZED = {
    "id": "resized",
    "why": "every step ran and the hypervisor reports the target",
    "plan": {"target_mib": 1024, "steps": [["plug_dimm", "kmdimm0", 512, 512]]},
    "after": {
        "done": [["plug_dimm", "kmdimm0", 512, 512]],
        "stop": None,
        "observed_mib": 1024,
        "deferrals": 0,
    },
    "expect": {"outcome": VERIFIED},
}


def _table(tmp_path: Path, *cases: Any) -> Path:
    path = tmp_path / "cases.json"
    path.write_text(json.dumps({"about": "a table of a test", "cases": list(cases)}))
    return path


def _refused(tmp_path: Path, table: str, *cases: Any) -> str:
    with pytest.raises(CaseFileError) as refused:
        load_cases(table, _table(tmp_path, *cases))
    return str(refused.value)


def test_a_well_formed_case_is_read(tmp_path: Path) -> None:
    assert load_cases("after-steps", _table(tmp_path, RESIZED)) == [RESIZED]


def test_a_misspelt_key_is_refused_and_named(tmp_path: Path) -> None:
    outcome = {"status": "Resized", "resaon": "", "reason": "", "message": "(verified)"}
    case = {**RESIZED, "expect": {"outcome": outcome}}
    message = _refused(tmp_path, "after-steps", case)
    assert "cases.json: cases[0] (id 'resized').expect.outcome: " in message, message
    assert "'resaon' was unexpected" in message, message


@pytest.mark.parametrize("missing", ["reason", "message"])
def test_an_outcome_case_that_expects_no_reason_or_message_is_refused(
    tmp_path: Path, missing: str
) -> None:
    outcome = {k: v for k, v in VERIFIED.items() if k != missing}
    message = _refused(tmp_path, "after-steps", {**RESIZED, "expect": {"outcome": outcome}})
    assert f"'{missing}' is a required property" in message, message


def test_an_empty_message_fragment_is_refused(tmp_path: Path) -> None:
    outcome = {"status": "Resized", "reason": "", "message": ""}
    message = _refused(tmp_path, "after-steps", {**RESIZED, "expect": {"outcome": outcome}})
    assert "expect.outcome.message" in message, message


def test_a_misspelt_input_key_is_refused_too(tmp_path: Path) -> None:
    """An input key that would silently fall back to its default (here the VM's devices)."""
    message = _refused(tmp_path, "after-steps", {**RESIZED, "vm": {"device": []}})
    assert "cases[0] (id 'resized').vm: " in message and "'device' was unexpected" in message


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    """JSON keeps the last of two equal keys, so the first never counts: a schema cannot
    see it, the loader does."""
    text = json.dumps({"about": "x", "cases": [RESIZED]})
    twice = text.replace('"why": ', '"why": "first", "why": ', 1)
    path = tmp_path / "cases.json"
    path.write_text(twice)
    with pytest.raises(CaseFileError, match=r"cases\[0\] \(id 'resized'\): key 'why' given twice"):
        load_cases("after-steps", path)


def test_two_cases_with_one_id_are_refused(tmp_path: Path) -> None:
    message = _refused(tmp_path, "after-steps", RESIZED, RESIZED)
    assert "case id 'resized' is used twice" in message, message


def test_a_case_without_a_why_is_refused(tmp_path: Path) -> None:
    for why in ("", " "):
        assert "why" in _refused(tmp_path, "after-steps", {**RESIZED, "why": why})
    case = {k: v for k, v in RESIZED.items() if k != "why"}
    assert "'why' is a required property" in _refused(tmp_path, "after-steps", case)


@pytest.mark.parametrize("table", TABLES)
def test_a_case_that_expects_nothing_is_refused_in_every_table(tmp_path: Path, table: str) -> None:
    case = {**load_cases(table)[0], "expect": {}}
    message = _refused(tmp_path, table, case)
    assert f"(id {case['id']!r}).expect: " in message, message


def test_every_case_file_is_in_one_table() -> None:
    """A case file that no table reads would be a table nobody runs."""
    files = sorted(FIXTURES.glob("*-cases/*.json"))
    read = sorted(f for where in TABLES.values() for f in files_of(FIXTURES / where))
    assert read == files


def test_every_table_loads() -> None:
    for table in TABLES:
        assert load_cases(table), table


def _objects(schema: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(schema, dict):
        if "properties" in schema or schema.get("type") == "object":
            found.append((where, schema))
        for key, value in schema.items():
            found += _objects(value, f"{where}/{key}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            found += _objects(value, f"{where}/{i}")
    return found


def test_every_schema_is_draft_2020_12_and_closes_every_object() -> None:
    schemas = sorted(SCHEMAS.glob("*.schema.json"))
    tables = {f"{t}.schema.json" for t in TABLES}
    assert {p.name for p in schemas} == {*tables, "common.schema.json"}
    for path in schemas:
        schema = json.loads(path.read_text())
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", path.name
        jsonschema.Draft202012Validator.check_schema(schema)
        objects = _objects(schema, path.name)
        open_objects = [where for where, o in objects if o.get("additionalProperties") is not False]
        assert open_objects == [], "additionalProperties: false everywhere"


def test_the_closing_rule_sees_an_open_object() -> None:
    schema = {"$defs": {"a": {"type": "object", "properties": {"b": {"type": "object"}}}}}
    assert [w for w, _ in _objects(schema, "s")] == ["s/$defs/a", "s/$defs/a/properties/b"]
