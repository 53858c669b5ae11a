"""The base of kata-mem's values: frozen records from msgspec (``msgspec.Struct`` with
``frozen=True``), and the helpers every layer uses on them, imported from here alone.

A record is ``class Name(Frozen):`` with annotated fields, in order, each required or with a
default (``field(default_factory=...)`` for one made per instance). msgspec writes its
``__init__`` (calling ``__post_init__`` when the class has one, and so does :func:`replace`
from msgspec 0.21 on), ``__repr__``, ``__eq__``
and ``__hash__`` over every field (equal only to an instance of the same class), and
refuses assignment and deletion with an :class:`AttributeError`, as a frozen dataclass
does. It compiles nothing when a class is created, and makes an instance or a copy in C;
what a cold process pays instead is importing msgspec (with :mod:`inspect` and :mod:`uuid`,
which its C core imports): the service once, a one-shot ``kata-mem shim`` at every start
(docs/benchmarks.md, "Records from msgspec").

msgspec has no ``compare=False``: a field left out of a value's equality is left out by
the class's own ``__eq__`` and ``__hash__``, which msgspec keeps (as
:class:`kata_mem.core.endpoint.Endpoint` and :class:`kata_mem.core.request.HostOverrides`
do).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field
from msgspec.structs import replace

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:  # read by type checkers only (PEP 681); at run time a no-op

    def dataclass_transform(**_: object) -> Callable[[Any], Any]:
        return lambda cls: cls


__all__ = ["Frozen", "field", "fields", "replace"]


# msgspec's own transform (on its metaclass) leaves a subclass of a frozen Struct mutable in
# a type checker's eyes, which then refuses it a frozen base: this one says every record is.
@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Frozen(Struct, frozen=True):
    """A frozen record: subclass it, annotate the fields."""


def fields(cls: type[Frozen]) -> tuple[str, ...]:
    """The names of a record's fields, in order."""
    return cls.__struct_fields__
