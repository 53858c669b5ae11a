"""Properties of the quantity parser: exact round trips, monotonicity, no surprises."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kata_mem.core.errors import QuantityError
from kata_mem.core.quantity import format_quantity, parse_quantity, quantity_bytes
from kata_mem.core.units import INT64_MAX

SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "k", "M", "G", "T", "m", "n", "u"]


@given(st.integers(min_value=-(2**62), max_value=2**62))
def test_integer_round_trip(n: int) -> None:
    assert parse_quantity(format_quantity(Fraction(n))) == n


@given(st.integers(min_value=0, max_value=10**15))
def test_nano_round_trip(nanos: int) -> None:
    value = Fraction(nanos, 10**9)
    assert parse_quantity(format_quantity(value)) == value


@given(
    st.integers(min_value=0, max_value=2**40),
    st.integers(min_value=0, max_value=2**40),
    st.sampled_from(SUFFIXES),
)
def test_monotone_in_the_number(a: int, b: int, suffix: str) -> None:
    lo, hi = sorted((a, b))
    assert parse_quantity(f"{lo}{suffix}") <= parse_quantity(f"{hi}{suffix}")


@given(st.integers(min_value=0, max_value=2**50), st.sampled_from(["Ki", "Mi", "Gi"]))
def test_binary_suffix_is_a_power_of_two(n: int, suffix: str) -> None:
    shift = {"Ki": 10, "Mi": 20, "Gi": 30}[suffix]
    if n << shift > INT64_MAX:
        # Above what CRI and the shim take: refused, not saturated (the command
        # line refuses what a shim request refuses).
        with pytest.raises(QuantityError, match="above 9223372036854775807 bytes"):
            quantity_bytes(f"{n}{suffix}")
    else:
        assert quantity_bytes(f"{n}{suffix}") == n << shift


@given(st.text(max_size=30))
def test_any_text_parses_or_raises_quantity_error(text: str) -> None:
    try:
        value = parse_quantity(text)
    except QuantityError:
        return
    # Whatever parses is a finite quantity with nano resolution.
    assert (value * 10**9).denominator == 1
