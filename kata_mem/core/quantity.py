"""Kubernetes resource quantities, parsed as strictly as Go's ``resource.ParseQuantity``.

The grammar (``k8s.io/apimachinery/pkg/api/resource``)::

    quantity = [+-] number [suffix]
    number   = digits | digits "." [digits] | "." digits
    suffix   = Ki | Mi | Gi | Ti | Pi | Ei          (binary, 2^10 .. 2^60)
             | n | u | m | "" | k | M | G | T | P | E  (decimal, 10^-9 .. 10^18)
             | (e | E) [+-] digits               (decimal exponent)

Values are exact (``Fraction``), never floats. As in Go, a non-zero value finer
than 1n rounds up (away from zero) to 1n, a binary-suffixed value is capped at
2^63-1, and the integer value used for bytes is the ceiling, so ``500m`` of
memory is 1 byte. Unlike Go's hand-written scanner, a lone ``.``, ``+`` or ``-``
is rejected rather than read as zero: in a limit it is always a typo.
"""

from __future__ import annotations

import re
from fractions import Fraction

from kata_mem.core.errors import QuantityError
from kata_mem.core.units import INT64_MAX

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?",
    re.ASCII,
)

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_NANO = Fraction(1, 10**9)
# Beyond this magnitude a value is only ever used capped at int64, so its exact
# digits do not matter; bounding it keeps 10**exponent cheap for inputs like 1e999999999.
_HUGE_EXP = 40
_MAX_DIGITS = 4000
_EXPECTED = (
    "expected a Kubernetes quantity such as 512Mi, 1.5Gi, 2G, 1e9 or 500m "
    "(binary suffixes Ki Mi Gi Ti Pi Ei, decimal n u m k M G T P E, or an exponent eN)"
)


_ABOVE_INT64 = Fraction(INT64_MAX + 1)


def parse_quantity(text: str) -> Fraction:
    """Parse ``text`` exactly as a Kubernetes quantity.

    :raises QuantityError: if ``text`` does not follow the grammar; the message
        quotes the text and says what was expected.
    """
    m = _QUANTITY.fullmatch(text)
    if m is None or not (m["int"] or m["frac"]):
        raise QuantityError(f"invalid quantity {text!r}: {_EXPECTED}")
    digits = ((m["int"] or "") + (m["frac"] or "")).lstrip("0")
    frac_len = len(m["frac"] or "")
    if len(digits) > _MAX_DIGITS:
        # int() refuses longer digit strings. A value with this many significant digits is
        # either capped or rounded up to whole nanos long before its last ones: keep the
        # first ones, and a sticky 1 for the rest so that rounding up still sees them.
        rest = digits[_MAX_DIGITS:]
        frac_len -= len(rest) - 1
        digits = digits[:_MAX_DIGITS] + ("1" if rest.strip("0") else "0")
    mantissa = int(digits) if digits else 0
    suffix = m["suffix"] or ""
    if suffix in _BINARY:
        if mantissa and len(digits) - frac_len < -30:
            value = _NANO  # below 10^-30 * 2^60 < 1n: rounds up to the smallest amount
        elif len(digits) - frac_len > _HUGE_EXP:
            value = _ABOVE_INT64  # at least 10^40: capped just below anyway
        else:
            value = Fraction(mantissa) / Fraction(10) ** frac_len * (1 << _BINARY[suffix])
        # Capped, as a decimal exponent is, but above every int64 so that a reader of
        # sizes still sees it is too large (``quantity_bytes`` refuses it).
        value = min(value, _ABOVE_INT64)
    else:
        if suffix in _DECIMAL:
            exp = _DECIMAL[suffix]
        else:
            exp = int(suffix[1:])
            if not -(2**31) <= exp < 2**31:
                raise QuantityError(f"invalid quantity {text!r}: exponent out of range")
        exp -= frac_len
        if mantissa == 0:
            value = Fraction(0)
        elif exp > _HUGE_EXP:
            value = Fraction(10**_HUGE_EXP)
        elif exp < -(len(digits) + 10):
            value = _NANO  # below 1n: rounds up to the smallest representable amount
        else:
            value = Fraction(mantissa) * Fraction(10) ** exp
    if value and value.denominator != 1:
        # Round up (away from zero) to whole nano units, as Go's inf.RoundUp at scale 9.
        nanos = -(-value.numerator * 10**9 // value.denominator)
        value = Fraction(nanos, 10**9)
    return -value if m["sign"] == "-" else value


def quantity_bytes(text: str, what: str = "memory", minimum: int = 0, least: str = "") -> int:
    """Parse a memory quantity into whole bytes (ceiling, like ``Quantity.Value()``).

    :raises QuantityError: on a malformed quantity, one below ``minimum`` bytes (written
        ``least`` in the message; 0: negative), or one above a signed 64-bit integer;
        ``what`` names the field in the message.
    """
    try:
        value = parse_quantity(text)
    except QuantityError as exc:
        raise QuantityError(f"{what}: {exc}") from exc
    if minimum > 0 and value < minimum:
        # One message for every value below it: "a size of 0 or more" would invite a 0.
        raise QuantityError(f"{what} {text[:40]!r}: expected at least {least or minimum}")
    if value < 0:
        raise QuantityError(f"{what}: {text!r} is negative; expected a size of 0 or more")
    size = -(-value.numerator // value.denominator)
    if size > INT64_MAX:
        # Refused, not saturated: a size no CRI field (int64) nor the shim takes, and a
        # saturated one would be planned as if it had been asked for.
        raise QuantityError(
            f"{what}: {text[:40]!r} is above {INT64_MAX} bytes (8 EiB - 1 byte); expected "
            "a size a signed 64-bit integer holds, as CRI and the shim take"
        )
    return size


#: The most CPUs a quantity may give: its millicores a signed 64-bit integer, as the
#: kubelet reads a CPU limit (``Quantity.MilliValue``, then ``milliCPUToQuota``).
MAX_CPUS = Fraction(INT64_MAX, 1000)


def cpu_count(text: str, what: str) -> Fraction:
    """Parse a CPU quantity (``500m``, ``2``) exactly.

    :raises QuantityError: on a malformed or negative quantity, or one of more millicores
        than a signed 64-bit integer holds; ``what`` names the field in the message.
        Refused, not capped: :func:`parse_quantity` caps a huge value at 10^40, which
        would then be planned and shown as if it had been asked for.
    """
    try:
        value = parse_quantity(text)
    except QuantityError as exc:
        raise QuantityError(f"{what}: {exc}") from exc
    if value < 0:
        raise QuantityError(f"{what}: negative; expected CPUs of 0 or more")
    if value > MAX_CPUS:
        raise QuantityError(
            f"{what}: above {INT64_MAX}m ({float(MAX_CPUS):.4g} CPUs); expected CPUs whose "
            "millicores a signed 64-bit integer holds, as the kubelet reads a CPU limit"
        )
    return value


def format_quantity(value: Fraction) -> str:
    """Canonical text for ``value`` that :func:`parse_quantity` reads back exactly.

    Whole values use the largest binary suffix that divides them; others are
    written in nano units (the finest resolution a quantity has).
    """
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value.denominator == 1:
        n = value.numerator
        for suffix, shift in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
            if n and n % (1 << shift) == 0:
                return f"{sign}{n >> shift}{suffix}"
        return f"{sign}{n}"
    nanos = value * 10**9
    if nanos.denominator != 1:
        raise ValueError(f"{value} is finer than 1n and is not a quantity")
    return f"{sign}{nanos.numerator}n"
