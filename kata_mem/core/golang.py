"""Go's parsers where Go code that kata-mem follows reads a value with them: ``strconv``'s
``ParseBool``, ``ParseUint`` and ``ParseInt`` and ``ParseFloat`` (32 bits), as Kata's Go runtime
reads a pod's annotations and go-yaml resolves a Pod's plain scalars
(:func:`kata_mem.core.manifest.go_yaml_scalar`), and ``regexp``'s ``MatchString`` for
``enable_annotations``. Pure.

Written from Go's rules (src/strconv/atoi.go ``ParseUint``, ``underscoreOK``;
src/strconv/atof.go ``special``, ``readFloat``, ``atofHex``; src/strconv/atob.go
``ParseBool``; src/regexp/syntax, the RE2 syntax), so that a value Kata accepts is
accepted here and one it refuses is refused. Each rule has its rows in
tests/fixtures/annotation-cases/hypervisor.json and tests/unit/test_golang.py.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Any, Optional, Union

#: ``strconv.ParseBool``: exactly these spellings (src/strconv/atob.go).
BOOLS = {
    "1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
    "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False,
}  # fmt: skip

#: The largest float32 and the point half a unit in the last place above it: Go's
#: ``ParseFloat(s, 32)`` rounds to the nearest float32 (ties to even, and the largest
#: float32's mantissa is odd), so from there on it rounds to infinity and answers
#: ``ErrRange`` (src/strconv/atof.go ``floatBits``, ``atofHex``).
FLOAT32_MAX = Fraction((1 << 24) - 1) * 2**104
FLOAT32_OVERFLOW = FLOAT32_MAX + 2**103
#: Significant digits kept exactly; beyond them a sticky digit stands for the rest, as
#: Go's ``trunc`` does (a float32 needs far fewer), so a long value stays cheap to read.
_DIGITS_KEPT = 800

GoFloat = Union[Fraction, float]  # a Fraction when finite; float inf, -inf or nan


def parse_bool(text: str) -> Optional[bool]:
    """``strconv.ParseBool(text)``; ``None`` where Go answers an error."""
    return BOOLS.get(text)


#: Per base, its digits and the longest digit string (leading zeros aside) that can fit
#: 64 bits: a longer one is out of range whatever the digits, and int() stays cheap.
_BASE_DIGITS = {
    b: frozenset("0123456789abcdef"[:b] + "0123456789ABCDEF"[:b]) for b in (2, 8, 10, 16)
}
_MAX_LEN = {2: 64, 8: 22, 10: 20, 16: 16}


def parse_uint(text: str, bits: int = 64, base: int = 10) -> Optional[int]:
    """``strconv.ParseUint(text, base, bits)`` for base 2, 8, 10, 16 or 0 (the prefix
    says: ``0b``, ``0o``, ``0x``, a leading ``0`` for octal, else decimal): ASCII digits
    only, no sign, leading zeros allowed, and with base 0 underscores where
    ``underscore_ok`` allows them; ``None`` where Go answers an error (syntax, or above
    ``2**bits - 1``)."""
    if not text:
        return None
    digits = text
    if base == 0:
        base = 10
        if text[0] == "0":
            prefix = text[1:2].lower() if len(text) >= 3 else ""
            base = {"b": 2, "o": 8, "x": 16}.get(prefix, 8)
            digits = text[2:] if prefix in ("b", "o", "x") else text[1:]
        if "_" in digits:  # atoi.go ParseUint: skipped as digits are read, then underscoreOK
            if not underscore_ok(text):
                return None
            digits = digits.replace("_", "")
    allowed = _BASE_DIGITS[base]
    if not all(c in allowed for c in digits):
        return None
    significant = digits.lstrip("0") or "0"
    if len(significant) > _MAX_LEN[base]:
        return None
    value = int(significant, base)
    return value if value < (1 << bits) else None


def parse_int(text: str, base: int, bits: int = 64) -> Optional[int]:
    """``strconv.ParseInt(text, base, bits)``: an optional sign, then as :func:`parse_uint`;
    ``None`` where Go answers an error (syntax, or outside ``-2**(bits-1)`` to
    ``2**(bits-1) - 1``)."""
    sign, rest = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    magnitude = parse_uint(rest, bits, base)
    if magnitude is None:
        return None
    value = sign * magnitude
    return value if -(1 << (bits - 1)) <= value < (1 << (bits - 1)) else None


def underscore_ok(text: str) -> bool:
    """Go's ``underscoreOK``: an underscore only between digits, or between a base
    prefix and a digit."""
    if text[:1] in ("+", "-"):
        text = text[1:]
    saw, i, hexa = "^", 0, False
    if len(text) >= 2 and text[0] == "0" and text[1] in "bBoOxX":
        saw, i, hexa = "0", 2, text[1] in "xX"
    digits = "0123456789abcdefABCDEF" if hexa else "0123456789"
    for c in text[i:]:
        if c in digits:
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
    return saw != "_"


def _special(text: str) -> Optional[float]:
    """Go's ``special``: ``inf``/``infinity`` with an optional sign, or ``nan`` without
    one, in any case; only when it is the whole text."""
    lower = text.lower()
    if lower in ("inf", "+inf", "infinity", "+infinity"):
        return float("inf")
    if lower in ("-inf", "-infinity"):
        return float("-inf")
    if lower == "nan":
        return float("nan")
    return None


def parse_float32(text: str) -> Optional[GoFloat]:
    """``strconv.ParseFloat(text, 32)``, the value kept exact (a Fraction) rather than
    rounded to a float32; ``None`` where Go answers an error: a syntax error, or a finite
    value that rounds beyond the largest float32 (``ErrRange``).

    Go's syntax: an optional sign; decimal digits with an optional point and ``e``
    exponent, or ``0x`` hexadecimal digits with an optional point and a *required* ``p``
    (binary) exponent (``0x1p1`` is 2); underscores between digits (``1_000``); ``inf``,
    ``infinity`` and ``nan`` in any case.
    """
    special = _special(text)
    if special is not None:
        return special
    i, n = 0, len(text)
    negative = False
    if i < n and text[i] in "+-":
        negative = text[i] == "-"
        i += 1
    hexa = i + 2 < n and text[i] == "0" and text[i + 1] in "xX"
    if hexa:
        i += 2
    digits = "0123456789abcdefABCDEF" if hexa else "0123456789"
    kept: list[str] = []
    point = sticky = 0  # digits kept after the point; a non-zero digit dropped
    dropped_before_point = 0
    seen_point = seen_digit = underscores = False
    while i < n:
        c = text[i]
        if c == "_":
            underscores = True
        elif c == ".":
            if seen_point:
                break
            seen_point = True
        elif c in digits:
            seen_digit = True
            if len(kept) < _DIGITS_KEPT:
                if kept or c != "0":
                    kept.append(c)
                if seen_point:
                    point += 1
            else:
                sticky |= c != "0"
                dropped_before_point += not seen_point
        else:
            break
        i += 1
    if not seen_digit:
        return None
    exponent = 0
    if i < n and text[i] in ("pP" if hexa else "eE"):
        i += 1
        sign = 1
        if i < n and text[i] in "+-":
            sign = -1 if text[i] == "-" else 1
            i += 1
        if i >= n or text[i] not in "0123456789":
            return None
        while i < n and (text[i] in "0123456789" or text[i] == "_"):
            if text[i] == "_":
                underscores = True
            elif exponent < 10000:  # as Go: a larger exponent is as good as infinite
                exponent = exponent * 10 + int(text[i])
            i += 1
        exponent *= sign
    elif hexa:
        return None  # Go: a hexadecimal mantissa must have an exponent
    if i != n or (underscores and not underscore_ok(text)):
        return None
    base = 16 if hexa else 10
    mantissa = int("".join(kept) or "0", base)
    if sticky:  # a digit past the last kept one: just above the kept value
        mantissa, point = mantissa * base + 1, point + 1
    scale = dropped_before_point - point
    value = Fraction(mantissa) * Fraction(base) ** scale
    if mantissa and exponent:
        value *= Fraction(2 if hexa else 10) ** exponent
    if value >= FLOAT32_OVERFLOW:
        return None
    return -value if negative else value


@functools.lru_cache(maxsize=256)
def compile_regexp(pattern: str) -> tuple[Any, str]:
    """A Go ``regexp.Compile(pattern)``: the compiled RE2 expression and ``""``, or
    ``None`` and why Go refuses the pattern.

    RE2 is the syntax of Go's regexp (the C++ library that Go's package was written
    from): no lookaround, no backreference, POSIX classes such as ``[[:lower:]]``.
    google-re2 is Google's own binding of it; ``\\C`` (any byte), which the C++
    library alone accepts, is refused as Go refuses it.

    :raises MissingDependency: google-re2 is not installed (only the platforms it has
        wheels for depend on it: pyproject.toml).
    """
    try:
        import re2
    except ImportError as exc:  # a platform without google-re2 wheels
        from kata_mem.core.errors import MissingDependency

        raise MissingDependency(
            "checking a hypervisor annotation against enable_annotations needs Go's regexp "
            f"syntax (RE2), from google-re2, which cannot be imported ({exc}); install it "
            "with: pip install 'google-re2>=1.1'"
        ) from exc
    if _has_any_byte_escape(pattern):
        return None, "invalid escape sequence: \\C"
    options = re2.Options()
    options.log_errors = False  # else RE2 writes its own line to stderr
    try:
        return re2.compile(pattern, options=options), ""  # type: ignore[no-untyped-call]
    except re2.error as exc:
        why = exc.args[0] if exc.args else exc
        return None, why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)


def _has_any_byte_escape(pattern: str) -> bool:
    """Whether ``pattern`` uses ``\\C`` outside a ``\\Q...\\E`` literal."""
    i, n = 0, len(pattern)
    while i < n:
        if pattern[i] != "\\" or i + 1 >= n:
            i += 1
            continue
        escaped = pattern[i + 1]
        if escaped == "C":
            return True
        if escaped == "Q":
            end = pattern.find("\\E", i + 2)
            i = n if end < 0 else end + 2
            continue
        i += 2
    return False


_SURROGATE = re.compile("[\ud800-\udfff]")


def regexp_match(pattern: str, text: str) -> Optional[bool]:
    """Go ``regexp.MatchString(pattern, text)``: whether ``pattern`` matches anywhere
    in ``text`` (unanchored); ``None`` for a pattern Go does not compile. A lone
    surrogate (JSON's ``"\\udcff"``, which Go's decoder reads as U+FFFD) is matched as
    U+FFFD: RE2 takes UTF-8, which has no surrogates."""
    compiled, _ = compile_regexp(_SURROGATE.sub("\ufffd", pattern))
    return None if compiled is None else compiled.search(_SURROGATE.sub("\ufffd", text)) is not None
