"""Go's parsers as Kata's Go runtime uses them, against the case table
(tests/fixtures/annotation-cases/go-parsers.json; its schema:
tests/fixtures/schemas/go-parsers.schema.json)."""

from __future__ import annotations

import math
import struct
import sys
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kata_mem.core import golang, gosyntax
from tests.support.cases import case_params

#: The largest float32: beyond it (by half a unit) a conversion overflows.
FLOAT32_LIMIT = float(golang.FLOAT32_MAX)


def _shown(value: Any) -> Any:
    """A parsed float as the table writes it: an exact fraction, or inf/-inf/nan."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"
    if isinstance(value, Fraction):
        return str(value)
    return value


@pytest.mark.parametrize("case", case_params("go-parsers"))
def test_go_parser_case(case: dict[str, Any]) -> None:
    text = case["input"]
    if case["go"] == "ParseFloat32":
        got: Any = _shown(golang.parse_float32(text))
    elif case["go"] == "FormatFloat32":
        assert golang.round_float32(Fraction(text)) == Fraction(text), "not a float32"
        got = golang.format_float32(Fraction(text))
    elif case["go"] == "Compile":
        refused = gosyntax.parse_error(text)
        got = "" if refused is None else str(refused)
    elif case["go"] == "ParseUint":
        got = golang.parse_uint(text)
    elif case["go"] == "ParseBool":
        got = golang.parse_bool(text)
    else:
        got = golang.regexp_match(case["pattern"], text)
    assert got == case["expect"]


def test_a_value_of_thousands_of_digits_is_read_not_refused_by_python() -> None:
    # int() refuses more than 4300 digits; Go reads leading zeros and long fractions.
    assert golang.parse_uint("0" * 5000 + "20") == 20
    # Read in full, then rounded to float32 as Go does: far below the smallest, 0.
    assert golang.parse_float32("0." + "0" * 5000 + "1") == 0
    assert golang.parse_float32("0." + "0" * 5000 + "1" + "e5000") == golang.round_float32(
        Fraction(1, 10)
    )
    assert golang.parse_float32("1" * 5000) is None  # beyond float32: ErrRange


def test_a_pattern_go_refuses_writes_nothing_to_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    # RE2 logs its parse errors to stderr unless told not to; the shim's stderr is the
    # runtime's log, and the refusal says it in its own words.
    assert golang.regexp_match("(?=x)", "x") is None
    assert golang.compile_regexp("(?=x)")[1] == "invalid or unsupported Perl syntax: `(?=`"
    assert capfd.readouterr().err == ""


def test_a_lone_surrogate_is_matched_as_go_reads_it() -> None:
    # JSON's "\udcff" (an OCI spec's annotation name) is U+FFFD to Go's decoder; RE2 takes
    # UTF-8, which cannot hold a surrogate: before, UnicodeEncodeError and a traceback.
    assert golang.regexp_match("^default_.memory$", "default_\udcffmemory") is True
    assert golang.regexp_match("^default_\ufffdmemory$", "default_\udcffmemory") is True


def test_without_google_re2_checking_a_pattern_is_exit_9(monkeypatch: pytest.MonkeyPatch) -> None:
    # Where google-re2 has no wheel it is not installed (pyproject.toml): the check of an
    # annotation says what to install, as a missing libvirt-python does.
    from kata_mem.core.errors import MissingDependency

    monkeypatch.setitem(sys.modules, "re2", None)
    golang.compile_regexp.cache_clear()
    try:
        with pytest.raises(MissingDependency, match=r"pip install 'google-re2>=1.1'") as info:
            golang.regexp_match("default_memory", "default_memory")
        assert info.value.exit_code == 9
    finally:
        golang.compile_regexp.cache_clear()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1_000", 1000),  # base 0: underscores between digits (atoi.go underscoreOK)
        ("0x_1f", 31),  # after a base prefix
        ("0_17", 15),  # after the octal 0
        ("0b_", None),  # a prefix and an underscore, no digit
        ("1__0", None),
        ("_1", None),
        ("1_", None),
    ],
)
def test_base_0_takes_underscores_where_go_does(text: str, value: int | None) -> None:
    # Found by Go's own ParseUint (tests/oracle/test_golang_oracle.py): with base 0 Go skips
    # the underscores as it reads the digits and then checks underscoreOK; kata-mem refused
    # every one. go-yaml removes them itself before calling it, so no Pod reads otherwise.
    assert golang.parse_uint(text, base=0) == value
    assert golang.parse_int(text, 0) == value
    assert golang.parse_int("-" + text, 0) == (None if value is None else -value)


@given(st.floats(min_value=-FLOAT32_LIMIT, max_value=FLOAT32_LIMIT, allow_subnormal=True))
def test_round_float32_is_the_c_conversion(number: float) -> None:
    # C's (float), which struct.pack does, is IEEE 754 round to nearest, ties to even:
    # Go's float32(x) of a float64. Subnormals included; above the limit both overflow.
    c_float = struct.unpack("f", struct.pack("f", number))[0]
    assert golang.round_float32(Fraction(number)) == Fraction(c_float)
    # And the text Go prints reads back as the same float32.
    assert golang.round_float32(Fraction(golang.format_float32(Fraction(c_float)))) == c_float


def test_a_number_beyond_float32_is_written_as_a_float64() -> None:
    # A workload of 1e40 CPUs is no float32 (Kata's would be +Inf); the vCPU line wrote
    # "1.00000000e+40", the longest of the float32 attempts.
    assert golang.format_float32(Fraction(10) ** 40) == "1e+40"
