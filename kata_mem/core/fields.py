"""Typed reads of decoded JSON and TOML values, for every document kata-mem reads.

One set of checks (what counts as an integer, a string, a boolean, an object)
and one error shape, ``<where> <field path>: expected <what>, got <value>``, for
shim requests, OCI specs and the configuration: a :class:`Fields` says where
its document is and how the document's language spells a value. Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Optional, TypeVar, Union

from kata_mem.core.errors import InputError, KataMemError
from kata_mem.core.units import INT64_MAX, INT64_MIN
from kata_mem.core.values import Frozen

T = TypeVar("T", bound=str)


def is_int(value: Any) -> bool:
    """An integer, and not a boolean (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An integer or a finite float."""
    return is_int(value) or (isinstance(value, float) and math.isfinite(value))


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def path(where: str, key: Union[str, int]) -> str:
    """The path of ``key`` inside ``where``, as errors name fields: ``containers[0].id``,
    ``annotations["io.kubernetes.cri.sandbox-memory"]``."""
    if isinstance(key, int):
        return f"{where}[{key}]"
    if key.isidentifier():
        return f"{where}.{key}" if where else key
    return f"{where}[{json.dumps(key)}]"


class Spelled(float):
    """A number a document held that no float can (``1e400``), with its text: decoded,
    it is infinite, and an error that showed ``Infinity`` would name a value the
    document never held. Never an integer, so every integer field refuses it."""

    text: str

    def __new__(cls, text: str) -> Spelled:
        number = super().__new__(cls, text)
        number.text = text
        return number


def spelled_float(text: str) -> float:
    """A number with a fraction or an exponent (``parse_float`` of ``json.loads`` and
    ``tomllib.loads``): a float, or a :class:`Spelled` one when it is not finite."""
    number = float(text)
    return number if math.isfinite(number) else Spelled(text)


def json_value(value: Any) -> str:
    """A value as JSON spells it (a :class:`Spelled` number as the document did); an
    object or a list by its type alone."""
    if isinstance(value, Spelled):
        return value.text[:80]
    shown = type(value).__name__ if isinstance(value, (dict, list)) else json.dumps(value)
    return shown[:80]


def integer_range(minimum: Optional[int], maximum: Optional[int]) -> str:
    """What an integer field takes, both bounds stated (a value just past an unstated
    upper bound would read as not an integer at all)."""
    if minimum is None and maximum is None:
        return "an integer"
    if maximum is None:
        return f"an integer from {minimum}"
    if minimum is None:
        return f"an integer up to {maximum}"
    return f"an integer from {minimum} to {maximum}"


def string_problem(value: Any) -> Optional[str]:
    """What is wrong with ``value`` as a path or id, or ``None``: named as it is (a NUL
    is not emptiness), for :meth:`Fields.string` and the checks that share its rule."""
    if not isinstance(value, str) or not value:
        return "a non-empty string"
    if "\0" in value:
        return "a string without NUL (U+0000: no path or id has one)"
    return None


def python_value(value: Any) -> str:
    """A value as Python spells it (the OCI reader's form; a :class:`Spelled` number as
    the document did); an object or a list by its type."""
    if isinstance(value, Spelled):
        return value.text[:80]
    return type(value).__name__ if isinstance(value, (dict, list)) else repr(value)[:80]


def toml_value(value: Any) -> str:
    """A value as a TOML file spells it; a table or an array by its type."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Spelled):
        return value.text
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, (int, float)):
        return str(value)
    return f"a {type(value).__name__}"


class KeyOnce:
    """A ``json`` ``object_pairs_hook`` that keeps every key of an object once: decoders
    disagree on which of two values counts (Python's and Go's keep the last, others the
    first), so an object with a key given twice is refused, naming its path
    (:meth:`check`, after the decode: the hook cannot know where it is)."""

    def __init__(self) -> None:
        self._twice: dict[int, str] = {}

    def __call__(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(pairs)
        if len(obj) < len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    self._twice[id(obj)] = key
                    break
                seen.add(key)
        return obj

    def __bool__(self) -> bool:
        """Whether some object had a key given twice."""
        return bool(self._twice)

    def refusal(self, obj: dict[str, Any], at: str, where: str) -> Optional[InputError]:
        """The error for ``obj`` (at path ``at`` of the document ``where`` names) when
        it had a key given twice."""
        key = self._twice.get(id(obj))
        if key is None:
            return None
        return InputError(
            f"{where} {path(at, key)}: the key {json.dumps(key)} is given more than once "
            "in one object; expected each key once"
        )

    def check(self, doc: Any, where: str) -> None:
        """:raises InputError: for the first object of ``doc``, in document order, with a
        key given twice; ``where`` names the document."""
        if not self._twice:
            return
        # Depth-first in document order, without recursion (the decoder has bounded the
        # depth, but the walk may start deeper in the stack than it did).
        todo: list[tuple[str, Any]] = [("", doc)]
        while todo:
            at, value = todo.pop()
            if isinstance(value, dict):
                refused = self.refusal(value, at, where)
                if refused is not None:
                    raise refused
                todo.extend(reversed([(path(at, k), v) for k, v in value.items()]))
            elif isinstance(value, list):
                todo.extend(reversed([(path(at, i), v) for i, v in enumerate(value)]))


class Fields(Frozen):
    """Typed reads from one document. ``where`` names the document in errors
    (``request``, ``/path/config.json:``); the readers take the object, the key and
    the path of the object inside the document (``""`` at the top)."""

    where: str
    error: Callable[[str], KataMemError] = InputError
    show: Callable[[Any], str] = json_value

    def name(self, at: str) -> str:
        """The field ``at`` as errors name it."""
        return f"{self.where} {at}" if at else self.where

    def fail(self, at: str, expected: str, value: Any) -> KataMemError:
        return self.error(f"{self.name(at)}: expected {expected}, got {self.show(value)}")

    def only(self, obj: Mapping[str, Any], allowed: Collection[str], at: str = "") -> None:
        """Refuse a key that is not in ``allowed``."""
        extra = sorted(set(obj) - set(allowed))
        if extra:
            raise self.error(
                f"{self.name(at)}: unknown field {extra[0]!r}; expected only "
                + ", ".join(sorted(allowed))
            )

    def integer(
        self,
        obj: Mapping[str, Any],
        key: str,
        at: str = "",
        *,
        minimum: Optional[int] = INT64_MIN,
        maximum: Optional[int] = INT64_MAX,
    ) -> Optional[int]:
        """``obj[key]``, an integer from ``minimum`` to ``maximum`` (None: unbounded);
        None when absent or null."""
        value = obj.get(key)
        if value is None:
            return None
        low = -math.inf if minimum is None else minimum
        high = math.inf if maximum is None else maximum
        if not is_int(value) or not low <= value <= high:
            raise self.fail(path(at, key), integer_range(minimum, maximum), value)
        return int(value)

    def required_integer(
        self,
        obj: Mapping[str, Any],
        key: str,
        at: str = "",
        *,
        minimum: int = INT64_MIN,
        maximum: int = INT64_MAX,
    ) -> int:
        value = self.integer(obj, key, at, minimum=minimum, maximum=maximum)
        if value is None:
            raise self.fail(path(at, key), integer_range(minimum, maximum), None)
        return value

    def string(self, obj: Mapping[str, Any], key: str, at: str = "") -> Optional[str]:
        """``obj[key]``, a non-empty string without NUL (no path or id has one);
        None when absent or null."""
        value = obj.get(key)
        if value is None:
            return None
        problem = string_problem(value)
        if problem is not None:
            raise self.fail(path(at, key), problem, value)
        return str(value)

    def required_string(self, obj: Mapping[str, Any], key: str, at: str = "") -> str:
        value = self.string(obj, key, at)
        if value is None:
            raise self.fail(path(at, key), "a non-empty string", None)
        return value

    def boolean(
        self, obj: Mapping[str, Any], key: str, at: str = "", default: bool = False
    ) -> bool:
        """``obj[key]``, true or false; ``default`` when absent (null is refused)."""
        value = obj.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(path(at, key), "true or false", value)
        return value

    def object(self, value: Any, at: str) -> dict[str, Any]:
        """``value`` itself (an element of a list, a whole reply), which must be an object."""
        if not isinstance(value, dict):
            raise self.fail(at, "an object", value)
        return value

    def mapping(
        self, obj: Mapping[str, Any], key: str, at: str = "", expected: str = "null or an object"
    ) -> Optional[dict[str, Any]]:
        """``obj[key]``, an object; None when absent or null."""
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self.fail(path(at, key), expected, value)
        return value

    def choice(
        self,
        obj: Mapping[str, Any],
        key: str,
        choices: Sequence[T],
        at: str = "",
        default: Optional[T] = None,
    ) -> T:
        """``obj[key]``, one of ``choices``; ``default`` when absent."""
        value = obj.get(key, default)
        for choice in choices:
            if value == choice:
                return choice
        raise self.fail(path(at, key), " | ".join(choices), value)


#: Errors about a shim request name its fields: ``request containers[0].id: ...``.
REQUEST = Fields("request")
