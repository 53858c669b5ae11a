"""Pod manifests decoded the way Kubernetes decodes them, numbers included.

Kubernetes reads a YAML manifest in two steps (``sigs.k8s.io/yaml``, ``yamlToJSON``):
go-yaml v2 turns the YAML into Go values and ``encoding/json`` writes those out as
JSON; the API types then decode that JSON, and a resource quantity parses the *text*
of its JSON value (apimachinery ``Quantity.UnmarshalJSON``: ``null`` is zero, the
quotes of a string are cut off, surrounding white space is trimmed, the rest goes to
``ParseQuantity``). A JSON manifest skips the first step. So an unquoted ``cpu: 0.5``
is the quantity 0.5, while ``memory: 12:30``, the number 750 to PyYAML (YAML 1.1), is
the string "12:30" to go-yaml v2 and no quantity at all.

This module reproduces both steps for what kata-mem reads:

- YAML plain scalars are typed by go-yaml v2's rules (:func:`go_yaml_scalar`), not
  YAML 1.1's; the rest of the YAML is read by PyYAML (its C loader when present);
- a number becomes the text ``encoding/json`` writes for it (:func:`go_json_float`);
- a JSON manifest (first non-blank character ``{``, as apimachinery's
  ``YAMLOrJSONDecoder`` sniffs it for kubectl: then JSON only, a stream of documents;
  or ``[``, a list, never a Pod) is read with :mod:`json`, keeping the text of every
  number and of every string that had an escape, since that text is what Kubernetes
  parses.

Sources (the versions Kubernetes vendors): go-yaml v2.4.x ``resolve.go`` and
``decode.go`` (``go.yaml.in/yaml/v2`` v2.4.2 in ``sigs.k8s.io/yaml`` v1.5+, its
fork ``sigs.k8s.io/yaml/goyaml.v2`` = v2.4.0 in v1.4.0); ``sigs.k8s.io/yaml``
``yaml.go``; Go ``encoding/json`` ``floatEncoder``/``appendString`` and ``strconv``;
apimachinery ``pkg/api/resource/quantity.go`` and ``pkg/util/yaml/decoder.go``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import json.decoder
import json.scanner
import math
import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Union

import yaml

from kata_mem.core import golang
from kata_mem.core.errors import InputError, QuantityError
from kata_mem.core.fields import KeyOnce
from kata_mem.core.quantity import parse_quantity
from kata_mem.core.units import INT64_MAX, INT64_MIN
from kata_mem.core.values import Frozen

if TYPE_CHECKING:
    _Loader = yaml.SafeLoader
else:  # the C loader is 5-10x faster; PyYAML without libyaml has only the Python one
    _Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
#: libyaml refuses nesting deeper than this by itself only from 0.2.6 on (yaml/libyaml PR
#: 287). Before, PyYAML's C composer recurses on the C stack until a deep manifest kills
#: kata-mem with SIGSEGV: PyYAML 6.0.3, the newest for Python 3.9, bundles libyaml 0.2.5,
#: and distributions' libyaml packages are 0.2.5. Its parser streams events without
#: recursing, so with such a libyaml they are counted first (the Python loader stops at
#: Python's recursion limit by itself).
_MAX_NESTING = 1000
_COUNT_NESTING = _Loader is not yaml.SafeLoader and getattr(
    getattr(yaml, "_yaml", None), "get_version", lambda: (0, 0, 0)
)() < (0, 2, 6)

#: Go's ``unicode.IsSpace``, which ``strings.TrimSpace`` (``Quantity.UnmarshalJSON``) trims.
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


# --- go-yaml v2: how a plain scalar is typed --------------------------------------------

# resolve.go resolveMapList: YAML 1.1 booleans and nulls, and the special floats.
_WORDS: dict[str, Union[bool, float, None]] = {
    **dict.fromkeys(("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE"), True),
    **dict.fromkeys(("on", "On", "ON"), True),
    **dict.fromkeys(("n", "N", "no", "No", "NO", "false", "False", "FALSE"), False),
    **dict.fromkeys(("off", "Off", "OFF"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
# resolve.go yamlStyleFloat (Go's $ is the end of the text: use fullmatch).
_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", re.ASCII)
# What strconv.ParseFloat reads of a scalar that starts with "." (underscores checked apart).
_DOT_FLOAT = re.compile(r"\.[0-9_]*[0-9][0-9_]*([eE][-+]?[0-9][0-9_]*)?", re.ASCII)


def go_yaml_scalar(text: str) -> Union[bool, int, float, str, None]:
    """The value go-yaml v2 gives an untagged plain scalar decoded into ``interface{}``.

    resolve.go ``resolve``: the YAML 1.1 words above; then, for text starting with a
    digit or a sign, an int if ``strconv.ParseInt``/``ParseUint`` (base 0: ``0x``,
    ``0o``, ``0b`` and a leading ``0`` for octal; underscores removed first) reads it,
    a float if it matches ``yamlStyleFloat`` and ``ParseFloat`` reads it in range, then
    the ``0b`` forms again; for text starting with ``.``, a float if ``ParseFloat``
    reads it. Anything else is a string: base-60 numbers (``12:30``) are not numbers
    in go-yaml v2, and a timestamp decoded into ``interface{}`` stays the string it
    was (decode.go, "for backward compatibility").
    """
    if text in _WORDS:
        return _WORDS[text]
    head = text[:1]
    if head == ".":
        return _go_dot_float(text)
    if not head or head not in "+-0123456789":
        return text
    plain = text.replace("_", "")
    for value in (golang.parse_int(plain, 0), golang.parse_uint(plain, base=0)):
        if value is not None:
            return value
    if _YAML_STYLE_FLOAT.fullmatch(plain):
        number = float(plain)
        if math.isfinite(number):  # ParseFloat's ErrRange (overflow) falls through
            return number
    if plain.startswith("0b"):
        for value in (golang.parse_int(plain[2:], 2), golang.parse_uint(plain[2:], base=2)):
            if value is not None:
                return value
    elif plain.startswith("-0b"):
        value = golang.parse_int("-" + plain[3:], 2)
        if value is not None:
            return value
    return text


def _go_dot_float(text: str) -> Union[float, str]:
    """resolve.go's ``case '.'``: ``strconv.ParseFloat(text, 64)``, else the string."""
    if not _DOT_FLOAT.fullmatch(text) or ("_" in text and not golang.underscore_ok(text)):
        return text
    number = float(text.replace("_", ""))
    return number if math.isfinite(number) else text


def go_json_float(number: float) -> str:
    """``encoding/json``'s text for a float64: the shortest digits that read back as
    ``number`` (``strconv.AppendFloat(f, fmt, -1, 64)``), plain for 1e-6 <= |f| < 1e21,
    else with an exponent (``e-7``, ``e+21``).

    :raises ValueError: for NaN and infinities, which ``json.Marshal`` refuses
        ("json: unsupported value").
    """
    if not math.isfinite(number):
        raise ValueError(f"json: unsupported value: {number}")
    if number == 0:
        return "-0" if math.copysign(1, number) < 0 else "0"
    # repr() gives the shortest round-tripping digits, as Go's precision -1 does.
    sign, digits, exponent = Decimal(repr(number)).normalize().as_tuple()
    assert isinstance(exponent, int)
    mantissa = "".join(map(str, digits))
    if 1e-6 <= abs(number) < 1e21:
        point = len(mantissa) + exponent
        if point <= 0:
            text = "0." + "0" * -point + mantissa
        elif point >= len(mantissa):
            text = mantissa + "0" * (point - len(mantissa))
        else:
            text = mantissa[:point] + "." + mantissa[point:]
    else:
        power = exponent + len(mantissa) - 1
        body = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
        # Two exponent digits at least, except that json cleans e-07 up to e-7.
        text = f"{body}e{'-' if power < 0 else '+'}{abs(power):02d}"
        text = re.sub(r"e-0([0-9])$", r"e-\1", text)
    return ("-" if sign else "") + text


# What json.Marshal escapes in a Go string (HTML characters too: it escapes by default).
_JSON_ESCAPED = re.compile('[\\x00-\\x1f"\\\\<>&\u2028\u2029]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def go_json_string(text: str) -> str:
    """The body of the JSON string ``json.Marshal`` writes for ``text`` (no quotes)."""
    return _JSON_ESCAPED.sub(
        lambda m: _SHORT_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), text
    )


class JsonNumber(Frozen):
    """A number of a JSON manifest, kept as its text: that text is what Kubernetes parses."""

    text: str


class JsonString(str):
    """A string of a JSON manifest whose text differs from its value (an escape such as
    ``\\u0031``) or holds U+2028/U+2029; ``raw`` is the text between the quotes."""

    raw: str

    def __new__(cls, value: str, raw: str) -> JsonString:
        obj = super().__new__(cls, value)
        obj.raw = raw
        return obj


def json_text(value: Any) -> str:
    """The JSON text of a decoded manifest value as Kubernetes' API decoder sees it.

    :raises ValueError: for a value ``json.Marshal`` refuses (NaN, infinities).
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_json_float(value)
    if isinstance(value, JsonNumber):
        return value.text
    if isinstance(value, JsonString):
        return f'"{value.raw}"'
    if isinstance(value, str):
        return f'"{go_json_string(value)}"'
    return json.dumps(value, default=str, allow_nan=False)


# A big pod repeats a few values many times; Fractions are immutable, so share them.
_parse = functools.lru_cache(maxsize=256)(parse_quantity)

_SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?", re.ASCII)


def kubernetes_quantity(value: Any, field: str) -> Fraction:
    """The quantity Kubernetes reads from a decoded manifest value (``Quantity.UnmarshalJSON``
    on its JSON text): a string or a number, ``null`` (zero).

    :raises QuantityError: naming ``field``, when Kubernetes would refuse the value.
    """
    if isinstance(value, bool):
        raise QuantityError(
            f"{field}: expected a quantity, got the boolean {json_text(value)}"
            " (Kubernetes reads unquoted y, yes, on, true, n, no, off, false as booleans)"
        )
    if isinstance(value, (list, dict)):
        kind = "a list" if isinstance(value, list) else "a mapping"
        raise QuantityError(f"{field}: expected a quantity such as 512Mi or 0.5, got {kind}")
    try:
        text = json_text(value)
    except ValueError as exc:
        raise QuantityError(
            f"{field}: {value} is not a quantity (Kubernetes cannot write an infinite or"
            " NaN number as JSON and refuses the manifest)"
        ) from exc
    if text == "null":
        return Fraction(0)
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    try:
        return _parse(text.strip(GO_SPACE))
    except QuantityError as exc:
        hint = ""
        if isinstance(value, str) and _SEXAGESIMAL.fullmatch(value.strip(GO_SPACE)):
            hint = (
                " (Kubernetes' YAML reader, go-yaml v2, reads an unquoted 12:30 as text,"
                " not as the YAML 1.1 base-60 number 750)"
            )
        elif isinstance(value, str) and "\\" in text:
            hint = f" (Kubernetes parses the JSON text of the string, escapes and all: {text})"
        raise QuantityError(f"{field}: {exc}{hint}") from exc


# --- Reading a manifest ------------------------------------------------------------------

_PLAIN = "tag:kata-mem,2025:go-yaml-plain"
_MERGE = "tag:yaml.org,2002:merge"


class GoYamlLoader(_Loader):
    """A safe YAML loader whose untagged plain scalars are typed as go-yaml v2 types them,
    and whose mappings refuse a key given twice."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return _MERGE if value == "<<" else _PLAIN
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # PyYAML keeps the last of two equal keys in silence; Kubernetes refuses them
        # (sigs.k8s.io/yaml UnmarshalStrict, go-yaml v2: 'key "memory" already set in
        # map'; kubectl's strict field validation). Keys a merge (<<) brings in may be
        # overridden, as in go-yaml: only the mapping's own keys are compared. The C
        # loader builds mappings through this Python constructor too.
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Node] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # unhashable: refused below, as PyYAML refuses it
                    continue
                if first is not key_node:
                    shown = json_text(key) if isinstance(key, str) else repr(key)
                    raise yaml.constructor.ConstructorError(
                        problem=f"line {key_node.start_mark.line + 1}: the key {shown} is "
                        "given more than once in one mapping (first on line "
                        f"{first.start_mark.line + 1}); expected each key once, as Kubernetes "
                        "does"
                    )
        return super().construct_mapping(node, deep)


def _plain(loader: GoYamlLoader, node: yaml.Node) -> Any:
    return go_yaml_scalar(str(node.value))


def _untyped(loader: GoYamlLoader, node: yaml.Node) -> Any:
    # go-yaml v2 ignores a tag it cannot resolve: a scalar stays its text, collections
    # stay collections (PyYAML's safe loader would refuse the whole document).
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_yaml_seq(node)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_yaml_map(node)
    raise yaml.constructor.ConstructorError(None, None, "unexpected node", node.start_mark)


def _typed(expected: type) -> Any:
    """An explicit ``!!int``/``!!float``/``!!bool``/``!!null`` as go-yaml v2 reads it: the
    scalar resolved as if untagged must have that type (an int may be a !!float)."""

    def construct(loader: GoYamlLoader, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return _untyped(loader, node)
        value = go_yaml_scalar(str(node.value))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            if INT64_MIN <= value <= INT64_MAX:  # Go converts int and int64, not uint64
                return float(value)
        elif expected is type(None) and value is None:
            return None
        elif isinstance(value, expected) and (expected is bool or not isinstance(value, bool)):
            return value
        raise yaml.constructor.ConstructorError(
            None, None, f"cannot decode {node.value!r} as {node.tag}", node.start_mark
        )

    return construct


def _binary(loader: GoYamlLoader, node: yaml.Node) -> Any:
    # decode.go: base64.StdEncoding (which skips line breaks), then a Go string;
    # json.Marshal turns bytes that are not UTF-8 into U+FFFD.
    text = str(loader.construct_scalar(node)).replace("\r", "").replace("\n", "")  # type: ignore[arg-type]
    try:
        return base64.b64decode(text, validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError) as exc:
        raise yaml.constructor.ConstructorError(
            None, None, "!!binary value contains invalid base64 data", node.start_mark
        ) from exc


GoYamlLoader.add_constructor(_PLAIN, _plain)
GoYamlLoader.add_constructor("tag:yaml.org,2002:int", _typed(int))
GoYamlLoader.add_constructor("tag:yaml.org,2002:float", _typed(float))
GoYamlLoader.add_constructor("tag:yaml.org,2002:bool", _typed(bool))
GoYamlLoader.add_constructor("tag:yaml.org,2002:null", _typed(type(None)))
GoYamlLoader.add_constructor("tag:yaml.org,2002:timestamp", _untyped)
GoYamlLoader.add_constructor("tag:yaml.org,2002:binary", _binary)
GoYamlLoader.add_constructor(None, _untyped)


_scanstring: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _after_space(text: str, at: int) -> int:
    found = _JSON_WHITESPACE.match(text, at)
    return found.end() if found else at


def _json_string(text: str, end: int, strict: bool = True) -> tuple[str, int]:
    value, after = _scanstring(text, end, strict)
    raw = text[end : after - 1]
    if raw == value and "\u2028" not in raw and "\u2029" not in raw:
        return value, after
    return JsonString(value, raw), after


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (Kubernetes' JSON decoder refuses it)")


def _load_json(text: str, where: str) -> list[Any]:
    once = KeyOnce()
    decoder = json.JSONDecoder(
        parse_float=JsonNumber,
        parse_int=JsonNumber,
        parse_constant=_not_json,
        object_pairs_hook=once,
    )
    if "\\" in text or "\u2028" in text or "\u2029" in text:
        # Only the Python scanner lets a string keep its text; it is slower, so only here.
        decoder.parse_string = _json_string  # type: ignore[attr-defined]
        decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    docs = []
    at = _after_space(text, 0)
    while at < len(text):  # a stream of JSON documents, as kubectl reads one
        doc, at = decoder.raw_decode(text, at)
        docs.append(doc)
        at = _after_space(text, at)
    for i, doc in enumerate(docs):
        once.check(doc, f"{where}:" if len(docs) == 1 else f"{where}: document {i + 1}:")
    return docs


def _nesting(where: str) -> InputError:
    return InputError(
        f"{where}: nested too deeply to read (more than a few hundred levels of lists and"
        " mappings); a Pod manifest is a few levels deep"
    )


def _refuse_deep_nesting(text: str, where: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=GoYamlLoader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > _MAX_NESTING:
                raise _nesting(where)
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def load_documents(text: str, where: str) -> list[Any]:
    """The documents of a manifest: JSON when its first non-blank character is ``{`` or
    ``[``, else YAML (``---``-separated documents); null documents are dropped.

    :raises InputError: invalid JSON or YAML, or nesting too deep to read, naming ``where``.
    """
    if text.lstrip(GO_SPACE)[:1] in ("{", "["):
        try:
            return [d for d in _load_json(text, where) if d is not None]
        except RecursionError as exc:
            raise _nesting(where) from exc
        except ValueError as exc:  # JSONDecodeError, NaN, or an int() too long to convert
            raise InputError(f"{where}: invalid JSON: {exc}") from exc
    try:
        if _COUNT_NESTING:
            _refuse_deep_nesting(text, where)
        return [d for d in yaml.load_all(text, Loader=GoYamlLoader) if d is not None]
    except RecursionError as exc:  # the Python loader; libyaml stops at 1000 levels by itself
        raise _nesting(where) from exc
    except yaml.YAMLError as exc:
        message = " ".join(str(exc).replace('in "<unicode string>", ', "").split())
        if "maximum nesting depth" in message:
            raise _nesting(where) from exc
        raise InputError(f"{where}: invalid YAML/JSON: {message}") from exc
