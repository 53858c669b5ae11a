"""Kubernetes quantities: the Go vectors (apimachinery) and the rejections."""

from __future__ import annotations

from fractions import Fraction

import pytest

from kata_mem.core.errors import QuantityError
from kata_mem.core.quantity import format_quantity, parse_quantity, quantity_bytes
from kata_mem.core.units import INT64_MAX

ACCEPTED = [
    ("50Mi", 52428800),
    ("1000Gi", 1073741824000),
    ("1.5G", 1500000000),
    (".5Gi", 536870912),
    ("1e3", 1000),
    ("1E3", 1000),
    ("1e+3", 1000),
    ("1E", 10**18),
    ("1.G", 10**9),
    ("129e6", 129000000),
    ("123Mi", 128974848),
    ("0", 0),
    ("+5", 5),
    ("007", 7),
    ("1Ki", 1024),
    ("1k", 1000),
    ("1Ei", 2**60),
]


@pytest.mark.parametrize(("text", "value"), ACCEPTED)
def test_accepted(text: str, value: int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("0.9n", Fraction(1, 10**9)),
        ("1e-12", Fraction(1, 10**9)),
        ("-1m", Fraction(-1, 1000)),
    ],
)
def test_fractions_round_up_to_nano(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


def test_binary_caps_just_above_int64() -> None:
    # Above every int64, so that a size reader refuses it rather than taking INT64_MAX.
    assert parse_quantity("8Ei") == parse_quantity("99999999999999Ei") == INT64_MAX + 1
    assert parse_quantity("7Ei") == 7 << 60
    with pytest.raises(QuantityError, match="is above 9223372036854775807 bytes"):
        quantity_bytes("8Ei")


def test_500m_is_one_byte() -> None:
    assert quantity_bytes("500m") == 1


def test_huge_exponent_is_cheap_and_refused_as_bytes() -> None:
    # Refused, as the shim refuses a size above int64 (it used to saturate to INT64_MAX).
    with pytest.raises(QuantityError, match=r"--limit: '1e999999999' is above 9223372036854775807"):
        quantity_bytes("1e999999999", "--limit")
    assert quantity_bytes(str(INT64_MAX)) == INT64_MAX
    assert parse_quantity("0e999999999") == 0


@pytest.mark.parametrize(
    "text",
    [
        "1K",
        "1ki",
        "1.5e3Mi",
        "1_000",
        " 5",
        "5 ",
        "NaN",
        "Infinity",
        "",
        "1e",
        ".",
        "+",
        "-",
        "1.1.1",
        "1Mi ",
        "١٢",
    ],
)
def test_rejected(text: str) -> None:
    """Outside the grammar: the error quotes the text and says what was expected."""
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert str(info.value).startswith(
        f"invalid quantity {text!r}: expected a Kubernetes quantity such as 512Mi"
    )


def test_an_exponent_out_of_range_is_rejected_as_such() -> None:
    """In the grammar, but an exponent no int64 can follow: said as that, with the text."""
    with pytest.raises(QuantityError) as info:
        parse_quantity("1e99999999999")
    assert str(info.value) == "invalid quantity '1e99999999999': exponent out of range"


def test_negative_bytes_rejected_with_field_name() -> None:
    with pytest.raises(QuantityError, match=r"--limit: '-1Gi' is negative"):
        quantity_bytes("-1Gi", "--limit")


@pytest.mark.parametrize(
    "value",
    [Fraction(0), Fraction(1536 * 2**20), Fraction(1000), Fraction(1, 2), Fraction(-3 * 2**30)],
)
def test_format_round_trips(value: Fraction) -> None:
    assert parse_quantity(format_quantity(value)) == value


def test_format_prefers_largest_binary_suffix() -> None:
    assert format_quantity(Fraction(3 * 2**30)) == "3Gi"
    assert format_quantity(Fraction(1000)) == "1000"
