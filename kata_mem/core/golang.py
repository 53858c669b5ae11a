"""Go's parsers where Go code that kata-mem follows reads a value with them: ``strconv``'s
``ParseBool``, ``ParseUint`` and ``ParseInt`` and ``ParseFloat`` (32 bits), and a float32 as Go
rounds (``float32(x)``) and prints it (``%v``), as Kata's Go runtime
reads a pod's annotations and go-yaml resolves a Pod's plain scalars
(:func:`kata_mem.core.manifest.go_yaml_scalar`), and ``regexp``'s ``Compile`` and
``MatchString`` for ``enable_annotations`` (Go's parser: kata_mem.core.gosyntax). Pure.

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
from typing import TYPE_CHECKING, Any, Optional, Union

if TYPE_CHECKING:  # the parser is imported only when a pattern is checked
    from kata_mem.core.gosyntax import GoSyntaxError

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


#: A float32's significand (24 bits, the leading one implied) and its smallest unit, the
#: smallest subnormal 2^-149 (IEEE 754 binary32).
_FLOAT32_BITS = 24
_FLOAT32_TINY_EXPONENT = -149


def round_float32(value: Fraction) -> Fraction:
    """The float32 nearest ``value``, half-way to the even significand, exactly: what Go's
    ``float32(x)`` makes of a float64 (and ``strconv.ParseFloat(s, 32)`` of a decimal,
    src/strconv/atof.go), Rust's ``as f32`` and C's ``(float)``, with subnormals down to
    2^-149 and 0 below half of it. Kata holds ``default_vcpus`` and every vCPU sum as
    float32 (katautils/config.go ``NumVCPUs float32``, virtcontainers ``NumVCPUsF``;
    runtime-rs kata-types ``CpuInfo.default_vcpus: f32``).

    :raises OverflowError: ``value`` rounds beyond the largest float32 (Go: ``+Inf``,
        which no caller lets through: each checks Kata's range first).
    """
    if not value:
        return value
    n, d = abs(value.numerator), value.denominator
    # The exponent e of the leading bit: 2^e <= n/d < 2^(e + 1).
    e = n.bit_length() - d.bit_length()
    if (n << max(-e, 0)) < (d << max(e, 0)):
        e -= 1
    unit = max(e - (_FLOAT32_BITS - 1), _FLOAT32_TINY_EXPONENT)
    # Python's round() of a Fraction rounds half to even, as IEEE 754 does.
    significand = round(Fraction(n << max(-unit, 0), d << max(unit, 0)))
    rounded = Fraction(significand << max(unit, 0), 1 << max(-unit, 0))
    if rounded > FLOAT32_MAX:
        raise OverflowError(f"{value} is beyond the largest float32")
    return rounded if value > 0 else -rounded


def toml_float32(number: Union[int, float]) -> Fraction:
    """A TOML number decoded into a float32 field, as Kata's Go runtime decodes
    ``default_vcpus`` (BurntSushi/toml v1.6.0 decode.go ``unifyFloat64``: the float was
    read as a float64, ``strconv.ParseFloat(s, 64)`` as Python's ``float`` reads it, then
    ``reflect.Value.SetFloat`` converts it; an integer within ``maxSafeFloat32Int`` is
    exact) and runtime-rs its ``f32`` keys (the toml crate reads an f64, serde converts it
    ``as f32``). Two roundings, so a float64 half-way between two float32s goes to the even
    one: 2.0000001192092896 is 2 here and 2.0000002 as an annotation
    (:func:`parse_float32`). The caller checks Kata's range first."""
    return round_float32(Fraction(number))


def format_float32(value: Fraction) -> str:
    """A float32 as Go prints it with ``%v`` (``strconv.FormatFloat(f, 'g', -1, 32)``,
    src/strconv/ftoa.go): the fewest significant digits that read back as the same float32,
    as a decimal, or as ``d.ddde±XX`` when the decimal exponent is below -4 or 6 and above
    (``eprec`` 6 for the shortest digits). How Kata's own logs and messages write vCPUs,
    and so kata-mem's: ``2.0000002``, not a float64's ``2.0000002384185791``."""
    if not value:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if magnitude >= FLOAT32_OVERFLOW:
        # No float32: a workload beyond its range, which the planner keeps as it is
        # (Kata's would be +Inf); written as Go writes a float64 (%v).
        return f"{float(value):g}"
    # float() of a float32 is exact; 9 significant digits always read back as the same.
    for digits in range(1, 10):
        text = f"{float(magnitude):.{digits - 1}e}"
        read = Fraction(text)  # rounded up past the largest float32, it reads as +Inf
        if read < FLOAT32_OVERFLOW and round_float32(read) == magnitude:
            break
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text)
    figures = mantissa.replace(".", "")
    if exponent < -4 or exponent >= 6:
        rest = figures[1:]
        return f"{sign}{figures[0]}{'.' + rest if rest else ''}e{exp_text[0]}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{figures}"
    whole, frac = figures[: exponent + 1], figures[exponent + 1 :]
    return f"{sign}{whole.ljust(exponent + 1, '0')}{'.' + frac if frac else ''}"


def parse_float32(text: str) -> Optional[GoFloat]:
    """``strconv.ParseFloat(text, 32)``: the float32 Go rounds the number to, held exactly
    (a Fraction: :func:`round_float32`); ``None`` where Go answers an error: a syntax
    error, or a finite value that rounds beyond the largest float32 (``ErrRange``).

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
    # Rounded from the digits kept and the sticky one, as Go rounds from its own
    # truncated decimal: one rounding, straight to 24 bits.
    value = round_float32(value)
    return -value if negative else value


#: What RE2 may use for one pattern: enough for every pattern Go's parser accepts. Go stops
#: at ``maxSize``, 3,355,443 instructions (kata_mem.core.gosyntax); RE2's default budget,
#: 8 MiB, refuses patterns far smaller, which Kata matches (one of 3.35 million Go
#: instructions compiles in about 200 MiB: measured with google-re2 1.1).
RE2_MAX_MEM = 512 << 20
#: How much of a long pattern a message shows.
SHOWN = 60


def shorten(text: str) -> str:
    """``text`` as a message shows it: whole, or its first characters and its length (a
    pattern refused for its size can be a megabyte)."""
    if len(text) <= SHOWN + 20:
        return text
    return f"{text[:SHOWN]}... ({len(text)} characters)"


def go_reason(error: GoSyntaxError) -> str:
    """Why Go refuses a pattern, in Go's words (its ``*syntax.Error`` without the
    ``error parsing regexp:`` in front), the expression shortened."""
    return f"{error.code}: `{shorten(error.expr)}`"


@functools.lru_cache(maxsize=256)
def compile_regexp(pattern: str) -> tuple[Any, str]:
    """A Go ``regexp.Compile(pattern)``: the compiled RE2 expression and ``""``, or
    ``None`` and why Go refuses the pattern (:func:`go_reason`).

    Whether Go compiles it is Go's parser's to say (kata_mem.core.gosyntax): its syntax
    errors and its limits, a tree nested beyond 1000 levels, a program or classes too
    large, which RE2 does not have. The matching is RE2's, the C++ library Go's package was
    written from (no lookaround, no backreference, POSIX classes such as ``[[:lower:]]``),
    through Google's binding google-re2, with memory for any pattern Go accepts.

    :raises ConfigError: Go compiles the pattern and RE2 does not (a Unicode class name only
        Go 1.25 and later reads, ``\\p{greek}`` or ``\\p{Letter}``): kata-mem cannot tell what
        it allows, and says so rather than guess.
    :raises MissingDependency: google-re2 is not installed (only the platforms it has
        wheels for depend on it: pyproject.toml) and a pattern Go compiles must be matched.
    """
    from kata_mem.core.gosyntax import parse_error

    refused = parse_error(pattern)
    if refused is not None:
        return None, go_reason(refused)
    try:
        import re2
    except ImportError as exc:  # a platform without google-re2 wheels
        from kata_mem.core.errors import MissingDependency

        raise MissingDependency(
            "checking a hypervisor annotation against enable_annotations needs Go's regexp "
            f"syntax (RE2), from google-re2, which cannot be imported ({exc}); install it "
            "with: pip install 'google-re2>=1.1'"
        ) from exc
    options = re2.Options()
    options.log_errors = False  # else RE2 writes its own line to stderr
    options.max_mem = RE2_MAX_MEM
    try:
        return re2.compile(pattern, options=options), ""  # type: ignore[no-untyped-call]
    except re2.error as exc:
        from kata_mem.core.errors import ConfigError

        why = exc.args[0] if exc.args else exc
        said = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        raise ConfigError(
            f"enable_annotations pattern {shorten(pattern)!r} is a Go regexp, but RE2, which "
            f"kata-mem matches annotations with, refuses it ({said}): kata-mem cannot tell "
            "which annotations it allows; write it in the syntax both read"
        ) from exc


_SURROGATE = re.compile("[\ud800-\udfff]")


def regexp_match(pattern: str, text: str) -> Optional[bool]:
    """Go ``regexp.MatchString(pattern, text)``: whether ``pattern`` matches anywhere
    in ``text`` (unanchored); ``None`` for a pattern Go does not compile. A lone
    surrogate (JSON's ``"\\udcff"``, which Go's decoder reads as U+FFFD) is matched as
    U+FFFD: RE2 takes UTF-8, which has no surrogates."""
    compiled, _ = compile_regexp(_SURROGATE.sub("\ufffd", pattern))
    return None if compiled is None else compiled.search(_SURROGATE.sub("\ufffd", text)) is not None
