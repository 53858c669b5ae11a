"""Frozen records: what kata-mem's values need of ``dataclass(frozen=True)``, without
compiling methods from source every time a process starts.

``dataclasses.dataclass`` writes each class's ``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__`` and ``__delattr__`` as source text and compiles it with
``exec()`` at class creation, in every process: the ~50 records a plan-only ``kata-mem
shim`` creates cost about 20 ms of its 64 ms, and importing :mod:`dataclasses` brings
:mod:`inspect`, :mod:`ast`, :mod:`dis` and :mod:`tokenize` with it (about 5 ms more;
``scripts/bench_shim_client.py``, docs/benchmarks.md). A ``@frozen`` class gets:

- ``__init__`` from its fields in order, each field required, with a default, or with a
  ``field(default_factory=...)``, calling ``__post_init__`` when the class has one. Its
  code comes from :mod:`kata_mem.core.frozen_init`, the same source written ahead of time
  by ``scripts/write_frozen_init.py`` and compiled to bytecode like any module; a class
  whose fields differ from what that file holds is compiled when it is created, from the
  same source (correct, only slower), and ``tests/unit/test_frozen.py`` fails until the
  file is written again;
- ``__eq__`` and ``__hash__`` over the tuple of its fields but those declared with
  ``field(compare=False)`` (equal only to an instance of the same class), ``__repr__`` as ``Name(field=value, ...)``, and ``__setattr__`` and
  ``__delattr__`` that raise :class:`FrozenInstanceError`; a method the class defines
  itself is kept, as dataclasses keeps it.

Not provided, because no record uses them: inheriting fields from another record,
``ClassVar`` and ``InitVar`` fields, per-field ``hash``/``repr``/``init`` options, ordering, slots, keyword-only fields.
"""

from __future__ import annotations

import sys
import types
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, TypeVar

from kata_mem.core.frozen_init import MAKERS

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # read by type checkers only (PEP 681); at run time a no-op

    def dataclass_transform(**_: object) -> Callable[[Any], Any]:
        return lambda fn: fn


T = TypeVar("T")

#: How a field gets its value when the caller gives none.
Kind = Literal["required", "default", "factory"]
#: A record's shape as its ``__init__`` depends on it: the fields with their kinds, and
#: whether ``__post_init__`` is called.
Shape = tuple[tuple[tuple[str, Kind], ...], bool]


class FrozenInstanceError(AttributeError):
    """A field of a frozen record was assigned or deleted (as
    :class:`dataclasses.FrozenInstanceError`, an :class:`AttributeError`)."""


class _Field:
    """``field(...)`` until the record is created."""

    __slots__ = ("compare", "default", "make")

    def __init__(self, default: object, make: Optional[Callable[[], Any]], compare: bool) -> None:
        self.default = default
        self.make = make
        self.compare = compare


#: No default given (a required field), where ``None`` is a default like any other.
_NONE: Any = object()


def field(
    *,
    default: Any = _NONE,
    default_factory: Optional[Callable[[], Any]] = None,
    compare: bool = True,
) -> Any:
    """A field with a default made for each instance by ``default_factory``, or one that
    ``__eq__`` and ``__hash__`` leave out (``compare=False``), as :func:`dataclasses.field`.
    """
    return _Field(default, default_factory, compare)


#: Records whose ``__init__`` was compiled when created, not read from
#: :mod:`kata_mem.core.frozen_init` (module and qualified name): a test says none is.
compiled_at_creation: list[str] = []


def init_source(shape: Shape) -> str:
    """The source of a function that makes a record's ``__init__``: it takes the tuple of
    defaults (``D``) and of default factories (``F``), in field order, as the class has them.

    Parameters are the field names, so a field may not be called ``self``, ``D`` or ``F``
    or start with ``__frozen_`` (the helpers' names): :func:`shape_of` refuses those.
    """
    fields, post_init = shape
    params, body = ["self"], []
    defaults = factories = 0
    for name, kind in fields:
        if kind == "required":
            params.append(name)
            value = name
        elif kind == "default":
            params.append(f"{name}=D[{defaults}]")
            defaults += 1
            value = name
        else:
            params.append(f"{name}=__frozen_missing")
            value = f"F[{factories}]() if {name} is __frozen_missing else {name}"
            factories += 1
        body.append(f"        __frozen_set(self, {name!r}, {value})")
    if post_init:
        body.append("        self.__post_init__()")
    if not body:
        body.append("        pass")
    return (
        f"def make(D, F):\n    def __init__({', '.join(params)}):\n"
        + "\n".join(body)
        + "\n    return __init__\n"
    )


#: What the code made from :func:`init_source` refers to besides its arguments: written
#: once at the head of :mod:`kata_mem.core.frozen_init`, and before a class compiled when
#: created. ``__frozen_missing`` stands for "no value given" where a factory makes one (shown
#: as ``<factory>`` in a signature, as dataclasses shows it).
PREAMBLE = (
    "__frozen_set = object.__setattr__\n"
    "__frozen_missing = type('factory', (), {'__repr__': lambda self: '<factory>'})()\n"
)


def _compile(shape: Shape) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(PREAMBLE + init_source(shape), namespace)  # our text, from field names
    make: Callable[..., Any] = namespace["make"]
    return make


def init_module(records: list[type]) -> str:
    """The text of :mod:`kata_mem.core.frozen_init` holding the ``__init__`` of ``records``."""
    keyed = sorted((f"{cls.__module__}.{cls.__qualname__}", _shape(cls)) for cls in records)
    parts = [
        '"""The __init__ of every frozen record, compiled to bytecode ahead of time.\n\n'
        "Written by scripts/write_frozen_init.py from kata_mem.core.frozen.init_source; do not\n"
        'edit (tests/unit/test_frozen.py checks it is what the script writes)."""\n\n',
        PREAMBLE,
    ]
    entries = []
    for key, shape in keyed:
        name = "make_" + key.replace(".", "_")
        parts.append("\n\n" + init_source(shape).replace("def make(", f"def {name}(", 1))
        entries.append(f"    {key!r}: ({shape!r}, {name}),\n")
    parts.append("\n\nMAKERS: dict = {\n" + "".join(entries) + "}\n")  # typed where read
    return "".join(parts)


def shape_of(cls: type) -> Shape:
    """The fields of a class in the order it declares them, and their kinds.

    :raises TypeError: a mutable default, a required field after one with a default (as
        dataclasses refuses both), a class that inherits from another record, or a field
        named as the generated ``__init__``'s own names.
    """
    for base in cls.__mro__[1:]:
        if "__frozen_shape__" in base.__dict__:
            raise TypeError(f"{cls.__qualname__}: a frozen record does not inherit fields")
    # The class's own annotations, without inspect (its import is what this module saves):
    # in its __dict__ up to Python 3.13, made when first read from 3.14 (PEP 649).
    annotations = cls.__dict__.get("__annotations__")  # noqa: RUF063
    if annotations is None:
        annotations = cls.__annotations__ if sys.version_info >= (3, 14) else {}
    fields: list[tuple[str, Kind]] = []
    for name, annotation in annotations.items():
        if str(annotation).startswith(("ClassVar", "typing.ClassVar", "InitVar")):
            raise TypeError(f"{cls.__qualname__}.{name}: ClassVar and InitVar are not supported")
        if name in ("self", "D", "F") or name.startswith("__frozen_"):
            raise TypeError(f"{cls.__qualname__}.{name}: a name the generated __init__ uses")
        value = cls.__dict__.get(name, _NONE)
        if isinstance(value, _Field):
            value = value.default if value.make is None else value
        kind: Kind
        if value is _NONE:
            kind = "required"
            if fields and fields[-1][1] != "required":
                raise TypeError(f"{cls.__qualname__}: required field {name!r} after a default")
        elif isinstance(value, _Field):
            kind = "factory"
        elif isinstance(value, (list, dict, set)):
            raise TypeError(f"{cls.__qualname__}.{name}: mutable default, use default_factory")
        else:
            kind = "default"
        fields.append((name, kind))
    return tuple(fields), "__post_init__" in cls.__dict__


def _refuse_set(self: object, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_delete(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen record (see the module's docstring)."""
    shape = shape_of(cls)
    fields, _ = shape
    names = tuple(name for name, _ in fields)
    key = f"{cls.__module__}.{cls.__qualname__}"
    cached: Optional[tuple[Shape, Callable[..., Any]]] = MAKERS.get(key)
    if cached is not None and cached[0] == shape:
        make = cached[1]
    else:
        compiled_at_creation.append(key)
        make = _compile(shape)
    specs = {name: cls.__dict__.get(name) for name, _ in fields}
    compared = tuple(
        name for name, spec in specs.items() if not isinstance(spec, _Field) or spec.compare
    )
    defaults, factories = [], []
    for name, kind in fields:
        spec = specs[name]
        if isinstance(spec, _Field):
            if spec.make is None:  # as dataclasses: the class attribute is the default
                setattr(cls, name, spec.default)
            else:  # as dataclasses: the instance always has its own value
                delattr(cls, name)
                factories.append(spec.make)
        if kind == "default":
            defaults.append(cls.__dict__[name])
    init = make(tuple(defaults), tuple(factories))
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    # setattr: a type checker refuses assigning to a method of a class (B010 prefers it)
    own = cls.__dict__
    methods: dict[str, Callable[..., Any]] = {
        "__init__": init,
        "__setattr__": _refuse_set,
        "__delattr__": _refuse_delete,
    }
    if "__repr__" not in own:
        methods["__repr__"] = _repr(names)
    if "__eq__" not in own:
        methods["__eq__"] = _eq(_values(compared))
    # A class that defines __eq__ alone has __hash__ = None written by Python: dataclasses
    # then writes its own; one that defines __hash__ keeps it.
    if own.get("__hash__") is None:
        methods["__hash__"] = _hash(_values(compared))
    for name, method in methods.items():
        setattr(cls, name, method)
    setattr(cls, "__frozen_shape__", shape)  # noqa: B010
    return cls


def _values(names: tuple[str, ...]) -> Callable[[object], tuple[Any, ...]]:
    if len(names) >= 2:
        values: Callable[[object], tuple[Any, ...]] = attrgetter(*names)
        return values
    if names:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _eq(values: Callable[[object], tuple[Any, ...]]) -> Callable[[object, object], Any]:
    def __eq__(self: object, other: object) -> Any:
        if other.__class__ is self.__class__:
            return values(self) == values(other)
        return NotImplemented

    return __eq__


def _hash(values: Callable[[object], tuple[Any, ...]]) -> Callable[[object], int]:
    def __hash__(self: object) -> int:
        return hash(values(self))

    return __hash__


def _repr(names: tuple[str, ...]) -> Callable[[object], str]:
    def __repr__(self: object) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({inner})"

    return __repr__


def _shape(cls: type) -> Shape:
    shape: Optional[Shape] = cls.__dict__.get("__frozen_shape__")
    if shape is None:
        raise TypeError(f"{cls.__qualname__} is not a frozen record")
    return shape


def fields(cls: type) -> tuple[str, ...]:
    """The names of a record's fields, in order.

    :raises TypeError: ``cls`` is not a frozen record.
    """
    return tuple(name for name, _ in _shape(cls)[0])


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of ``obj`` with ``changes``, made by its ``__init__`` (so its checks run), as
    :func:`dataclasses.replace`.

    :raises TypeError: a change names no field of the record.
    """
    cls = type(obj)
    names = fields(cls)
    unknown = changes.keys() - set(names)
    if unknown:
        raise TypeError(f"{cls.__qualname__} has no field {sorted(unknown)[0]!r}")
    values = {name: changes[name] if name in changes else getattr(obj, name) for name in names}
    return cls(**values)


def is_record(obj: object) -> bool:
    """Whether ``obj`` is a frozen record or an instance of one."""
    cls = obj if isinstance(obj, type) else type(obj)
    return "__frozen_shape__" in cls.__dict__


def module_records(module: types.ModuleType) -> list[type]:
    """The records a module defines at its top level (what ``frozen_init`` can hold)."""
    return [
        value
        for value in vars(module).values()
        if isinstance(value, type) and value.__module__ == module.__name__ and is_record(value)
    ]
