"""kata_mem/core/golang.py against Go's own strconv and regexp (tests/oracle/golang, the
machine's Go): every row of tests/fixtures/annotation-cases/go-parsers.json and every value
and pattern of tests/fixtures/annotation-cases/hypervisor.json, then generated values and
patterns (tests/strategies.py), each decided by both.

The only differences allowed are the rows of docs/design/compared-with-kata.md that this
module names (``KNOWN``); anything else Go and kata-mem decide differently fails."""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any, Optional

import pytest
import re2
from hypothesis import HealthCheck, given, settings

from kata_mem.core import golang
from kata_mem.core.errors import ConfigError
from kata_mem.core.gosyntax import parse_error
from tests.strategies import (
    GO_REGEXP_LIMITS,
    float32_values,
    go_bool_texts,
    go_float_texts,
    go_integer_texts,
    go_regexp_corpus,
    go_regexp_texts,
    go_regexps,
)
from tests.support.cases import case_params, load_cases
from tests.support.oracle import ORACLE_EXAMPLES, Oracle, go_float32

# The first test of a session may build the oracles: minutes on a machine whose Go caches
# are cold (docs/contributing/tests.md, "Differential tests").
pytestmark = [pytest.mark.go, pytest.mark.oracle, pytest.mark.timeout(900)]

ORACLE = settings(
    max_examples=ORACLE_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# -- how each side's answer is compared --------------------------------------------------


def float32_differences(text: str, go: dict[str, Any]) -> Optional[str]:
    """How kata-mem's ``parse_float32(text)`` differs from Go's ``ParseFloat(text, 32)``:
    the same refusals, and where both read a number, the same float32 (kata-mem holds it
    as a Fraction, exactly)."""
    ours = golang.parse_float32(text)
    if ours is None:
        return None if not go["ok"] else f"kata-mem refuses, Go reads {go_float32(go)!r}"
    if not go["ok"]:
        return f"Go refuses ({go['err']}), kata-mem reads {ours!r}"
    theirs = go_float32(go)
    if isinstance(ours, float):
        same = math.isnan(theirs) if math.isnan(ours) else theirs == ours
        return None if same else f"kata-mem {ours!r}, Go {theirs!r}"
    if ours != Fraction(theirs):
        return f"kata-mem {ours}, Go {theirs!r}"
    return None


def integer_differences(
    op: str, text: str, base: int, bits: int, go: dict[str, Any]
) -> Optional[str]:
    """How kata-mem's ``parse_uint``/``parse_int`` differs from Go's."""
    if op == "ParseUint":
        ours = golang.parse_uint(text, bits, base)
    else:
        ours = golang.parse_int(text, base, bits)
    theirs = int(go["value"]) if go["ok"] else None
    if ours == theirs:
        return None
    return f"{op}({text!r}, {base}, {bits}): kata-mem {ours}, Go {theirs} {go.get('err', '')}"


#: A Unicode class, named in braces or by one letter: ``\p{Greek}``, ``\P{^Lu}``, ``\pL``.
_CLASS_NAME = re.compile(r"\\[pP](?:\{\^?([^}]*)\}|([^{]))")


def re2_compiles(pattern: str) -> tuple[bool, str]:
    """Whether RE2 itself (google-re2, with the memory kata-mem gives it) compiles
    ``pattern``, and its refusal."""
    options = re2.Options()
    options.log_errors = False
    options.max_mem = golang.RE2_MAX_MEM
    try:
        re2.compile(pattern, options=options)  # type: ignore[no-untyped-call]
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        return False, why.decode() if isinstance(why, bytes) else str(why)
    return True, ""


def _class_names_only_go_reads(pattern: str, go_oracle: Oracle) -> bool:
    """Whether ``pattern`` names a Unicode class that Go's regexp reads and RE2 refuses:
    compared-with-kata.md, "``enable_annotations`` patterns", the class names Go 1.25 and
    later reads loosely (regexp/syntax/parse.go ``canonicalName``, ``unicodeTable``)."""
    for braced, letter in set(_CLASS_NAME.findall(pattern)):
        alone = "\\p{" + (braced or letter) + "}"
        if go_oracle.ask({"op": "Compile", "text": alone})["ok"] and not re2_compiles(alone)[0]:
            return True
    return False


def match_differences(
    pattern: str, text: str, go: dict[str, Any], go_oracle: Oracle
) -> Optional[str]:
    """How kata-mem's ``regexp_match`` differs from Go's ``regexp.MatchString``, but for
    the two documented differences (compared-with-kata.md, "``enable_annotations``
    patterns"): a pattern naming a Unicode class only Go reads, which kata-mem refuses as a
    configuration error (:func:`_class_names_only_go_reads`), and ``\\B`` in a text that is
    not ASCII."""
    try:
        ours = golang.regexp_match(pattern, text)
    except ConfigError:
        if go["ok"] and _class_names_only_go_reads(pattern, go_oracle):
            return None  # kata-mem cannot match as Go does, and says so
        return f"MatchString({pattern!r}, {text!r}): kata-mem refuses it, Go {go}"
    theirs = go["match"] if go["ok"] else None
    if ours == theirs:
        return None
    if "\\B" in pattern and not text.isascii():
        return None  # the same row: RE2 tries \B between the bytes of a character too
    why = "" if go["ok"] else f" ({go['err']})"
    ours_why = "" if ours is not None else f" ({golang.compile_regexp(pattern)[1]})"
    return f"MatchString({pattern!r}, {text!r}): kata-mem {ours}{ours_why}, Go {theirs}{why}"


def go_refusal(pattern: str) -> Optional[str]:
    """kata-mem's ``regexp.Compile`` error for ``pattern`` in Go's words, or ``None``."""
    refused = parse_error(pattern)
    return None if refused is None else str(refused)


# -- the case tables that say they were checked against Go -------------------------------


def _table_answer(case: dict[str, Any], go: dict[str, Any]) -> Any:
    """Go's answer to a go-parsers.json row, in the table's own notation."""
    if case["go"] == "ParseFloat32":
        if not go["ok"]:
            return None
        value = go_float32(go)
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    if case["go"] == "ParseUint":
        return int(go["value"]) if go["ok"] else None
    if case["go"] == "FormatFloat32":
        return go["value"] if go["ok"] else None
    if case["go"] == "Compile":  # "" where Go compiles the pattern, else its error's text
        return "" if go["ok"] else go["err"]
    if case["go"] == "ParseBool":
        return go["value"] == "true" if go["ok"] else None
    return go["match"] if go["ok"] else None


def _ask_row(go_oracle: Oracle, case: dict[str, Any]) -> dict[str, Any]:
    op = {"ParseFloat32": "ParseFloat", "ParseUint": "ParseUint"}.get(case["go"], case["go"])
    return go_oracle.ask(
        {
            "op": op,
            "text": case["input"],
            "pattern": case.get("pattern", ""),
            "base": 10,
            "bits": 32 if op == "ParseFloat" else 64,
        }
    )


@pytest.mark.parametrize("case", case_params("go-parsers"))
def test_go_parsers_row_is_what_go_answers(case: dict[str, Any], go_oracle: Oracle) -> None:
    go = _ask_row(go_oracle, case)
    expect = case["expect"]
    if case["go"] == "ParseFloat32" and go["ok"] and expect not in ("inf", "-inf", "nan"):
        # The table writes the float32 exactly, as a fraction.
        assert Fraction(expect) == Fraction(go_float32(go)), go
    else:
        assert _table_answer(case, go) == expect, go


def test_every_value_and_pattern_of_the_annotation_table_is_read_as_go_reads_it(
    go_oracle: Oracle,
) -> None:
    # hypervisor.json's rows are Kata's (which parser reads which key: part 3 of issue 34);
    # Go's own parsers decide every value there with every parser, and every pattern
    # against every annotation name.
    values, matches = set(), set()
    for case in load_cases("hypervisor-annotations"):
        for key, value in case["annotations"].items():
            values.add(value)
            for pattern in case["enable_annotations"]:
                matches.add((pattern, key))
                matches.add((pattern, "io.katacontainers.config.hypervisor." + key))
    texts = sorted(values)
    pairs = sorted(matches)
    assert len(texts) > 20 and len(pairs) > 40  # the table is read, not an empty loop
    answers = go_oracle.ask_many(
        [{"op": "ParseFloat", "text": t, "bits": 32} for t in texts]
        + [{"op": "ParseUint", "text": t, "base": 10, "bits": 64} for t in texts]
        + [{"op": "ParseBool", "text": t} for t in texts]
        + [{"op": "MatchString", "pattern": p, "text": t} for p, t in pairs]
    )
    n = len(texts)
    found = [float32_differences(t, a) for t, a in zip(texts, answers[:n], strict=True)]
    found += [
        integer_differences("ParseUint", t, 10, 64, a)
        for t, a in zip(texts, answers[n : 2 * n], strict=True)
    ]
    found += [
        None if golang.parse_bool(t) == (a["value"] == "true" if a["ok"] else None) else t
        for t, a in zip(texts, answers[2 * n : 3 * n], strict=True)
    ]
    found += [
        match_differences(p, t, a, go_oracle)
        for (p, t), a in zip(pairs, answers[3 * n :], strict=True)
    ]
    assert [f for f in found if f] == []


# -- generated values and patterns --------------------------------------------------------


@ORACLE
@given(go_float_texts())
def test_parse_float32_is_gos(go_oracle: Oracle, text: str) -> None:
    go = go_oracle.ask({"op": "ParseFloat", "text": text, "bits": 32})
    assert float32_differences(text, go) is None


@ORACLE
@given(float32_values())
def test_format_float32_is_gos(go_oracle: Oracle, value: Fraction) -> None:
    # How kata-mem writes a vCPU count (the preview, config check, runtimeclass), as fmt's
    # %v writes Kata's float32: every float32, subnormals and the largest included.
    go = go_oracle.ask({"op": "FormatFloat32", "text": str(value)})
    assert golang.format_float32(value) == go["value"]


@ORACLE
@given(go_integer_texts())
def test_parse_uint_and_parse_int_are_gos(go_oracle: Oracle, case: tuple[str, int, int]) -> None:
    text, base, bits = case
    for op in ("ParseUint", "ParseInt"):
        go = go_oracle.ask({"op": op, "text": text, "base": base, "bits": bits})
        assert integer_differences(op, text, base, bits, go) is None


@ORACLE
@given(go_bool_texts)
def test_parse_bool_is_gos(go_oracle: Oracle, text: str) -> None:
    go = go_oracle.ask({"op": "ParseBool", "text": text})
    assert golang.parse_bool(text) == (go["value"] == "true" if go["ok"] else None)


@ORACLE
@given(go_regexps(), go_regexp_texts)
def test_regexp_match_is_gos(go_oracle: Oracle, pattern: str, text: str) -> None:
    go = go_oracle.ask({"op": "MatchString", "pattern": pattern, "text": text})
    assert match_differences(pattern, text, go, go_oracle) is None
    assert go_refusal(pattern) == go.get("err")  # and refused in Go's words


# -- the documented differences, as they stand -------------------------------------------


def test_the_documented_regexp_differences_are_still_there(go_oracle: Oracle) -> None:
    # compared-with-kata.md, "``enable_annotations`` patterns", as upstream stands. When a
    # Go or google-re2 release changes one, this fails: update the row (and what kata-mem
    # does about it).
    # RE2 tries an empty-width assertion at every byte of UTF-8, so \\B holds inside "é"
    # (two non-word bytes), where Go, which steps by runes, finds no place for it in "0é0".
    go = go_oracle.ask({"op": "MatchString", "pattern": "\\B", "text": "0\u00e90"})
    assert (go["match"], golang.regexp_match("\\B", "0\u00e90")) == (False, True)
    # Go 1.25+ reads Unicode class names loosely (regexp/syntax/parse.go canonicalName,
    # unicode.CategoryAliases); RE2 takes Unicode's names as written: kata-mem refuses such
    # a pattern as a configuration error rather than guess what it allows.
    only_go = ("\\p{greek}", "\\pp", "\\p{Letter}")
    answers = go_oracle.ask_many([{"op": "Compile", "text": p} for p in only_go])
    assert [(a["ok"], re2_compiles(p)[0]) for p, a in zip(only_go, answers, strict=True)] == [
        (True, False)
    ] * 3
    for pattern in only_go:
        with pytest.raises(ConfigError, match="RE2"):
            golang.regexp_match(pattern, "a")


def test_what_go_refuses_and_re2_takes_is_refused(go_oracle: Oracle) -> None:
    # Go's parser (kata_mem.core.gosyntax) decides, not RE2: a tree 1000 levels high or
    # more (maxHeight: 1000 nested groups and the literal in them), Go 1.26's reading of a
    # script whose name has an underscore, RE2's any-byte \\C. RE2 compiles each; Go
    # refuses it, and so does kata-mem, in Go's words. And a large class repeated 1,000
    # times, beyond RE2's default memory budget, which Go compiles, is matched (kata-mem
    # gives RE2 the memory Go's limits need).
    patterns = ["(" * n + "a" + ")" * n for n in (999, 1000, 1001)]
    patterns += ["\\p{Nag_Mundari}", "\\C", "\\pL{1000}"]
    answers = go_oracle.ask_many(
        [{"op": "MatchString", "pattern": p, "text": "a"} for p in patterns]
    )
    assert [a["ok"] for a in answers] == [True, False, False, False, False, True]
    assert all(re2_compiles(p)[0] for p in patterns)
    for pattern, answer in zip(patterns, answers, strict=True):
        assert match_differences(pattern, "a", answer, go_oracle) is None
        assert go_refusal(pattern) == answer.get("err")


# Last: its corpus and limits cost seconds to parse, and a break is found sooner above.
def test_the_regexp_port_refuses_what_go_refuses_in_gos_words(go_oracle: Oracle) -> None:
    # kata_mem.core.gosyntax, Go's regexp/syntax ported: the table's Compile rows, the
    # patterns at Go's limits (tests/unit/test_gosyntax.py pins Go's answers), and a seeded
    # corpus of every kind of token the parser reads, each asked of regexp.Compile itself.
    table = [c["input"] for c in load_cases("go-parsers") if c["go"] == "Compile"]
    patterns = [*table, *(limit[1] for limit in GO_REGEXP_LIMITS), *go_regexp_corpus()]
    answers = go_oracle.ask_many([{"op": "Compile", "text": p} for p in patterns])
    wrong = [
        (p[:80], a.get("err", "")[:120], (go_refusal(p) or "")[:120])
        for p, a in zip(patterns, answers, strict=True)
        if go_refusal(p) != a.get("err")
    ]
    assert not wrong, wrong[:10]
