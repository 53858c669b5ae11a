"""Frozen records (kata_mem/core/frozen.py) behave as ``dataclass(frozen=True)`` for what
kata-mem uses, and every record's ``__init__`` comes from the file written ahead of time."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kata_mem
from kata_mem.core import frozen as frozen_module
from kata_mem.core.endpoint import Endpoint
from kata_mem.core.frozen import (
    FrozenInstanceError,
    field,
    fields,
    frozen,
    init_source,
    replace,
)
from kata_mem.core.frozen_init import MAKERS

ROOT = Path(__file__).resolve().parents[2]


def _import_every_module() -> None:
    for info in pkgutil.walk_packages(kata_mem.__path__, "kata_mem."):
        if info.name != "kata_mem.__main__":
            importlib.import_module(info.name)


def test_the_written_file_is_what_the_script_writes_now() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "write_frozen_init.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_record_of_the_package_is_compiled_when_created() -> None:
    _import_every_module()
    ours = [key for key in frozen_module.compiled_at_creation if key.startswith("kata_mem.")]
    assert ours == []
    # and the __init__ is the written one's code, not a copy compiled alike
    assert Endpoint.__init__.__code__.co_filename.endswith("frozen_init.py")
    assert len(MAKERS) >= 60


def test_a_stale_entry_under_the_records_key_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A maker written for other fields would set the wrong attributes: the shape is
    compared first."""
    key = f"{__name__}.Keyed"
    monkeypatch.setitem(MAKERS, key, (((("a", "required"),), False), _wrong_maker))
    namespace: dict[str, Any] = {"frozen": frozen, "__name__": __name__}
    exec("@frozen\nclass Keyed:\n    a: int\n    b: int = 2\n", namespace)
    keyed = namespace["Keyed"]
    assert key in frozen_module.compiled_at_creation
    assert (keyed(1).a, keyed(1).b) == (1, 2)


def _wrong_maker(defaults: Any, factories: Any) -> Any:
    def __init__(self: Any, a: Any) -> None:
        object.__setattr__(self, "wrong", a)

    return __init__


def test_a_matching_entry_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    key = f"{__name__}.Cached"
    shape: frozen_module.Shape = ((("a", "required"),), False)
    calls: list[Any] = []

    def maker(defaults: Any, factories: Any) -> Any:
        calls.append((defaults, factories))
        return frozen_module._compile(shape)(defaults, factories)

    monkeypatch.setitem(MAKERS, key, (shape, maker))
    namespace: dict[str, Any] = {"frozen": frozen, "__name__": __name__}
    exec("@frozen\nclass Cached:\n    a: int\n", namespace)
    assert calls == [((), ())]
    assert key not in frozen_module.compiled_at_creation


@frozen
class Sample:
    a: int
    b: Optional[str] = None
    c: tuple[int, ...] = field(default_factory=tuple)
    d: list[int] = field(default_factory=list)
    e: bool = field(default=False, compare=False)


@dataclasses.dataclass(frozen=True)
class Twin:
    a: int
    b: Optional[str] = None
    c: tuple[int, ...] = dataclasses.field(default_factory=tuple)
    d: list[int] = dataclasses.field(default_factory=list)
    e: bool = dataclasses.field(default=False, compare=False)


def test_as_dataclasses_construction_defaults_and_factories() -> None:
    one, two = Sample(1), Sample(1)
    assert (one.a, one.b, one.c, one.d, one.e) == (1, None, (), [], False)
    assert one.d is not two.d  # a factory makes one per instance
    assert "d" not in Sample.__dict__  # as dataclasses removes a factory field's attribute
    assert Sample.b is None and Sample.e is False
    assert Sample(1, "x", (2,), [3], True).d == [3]
    assert Sample(a=1, e=True).e is True
    with pytest.raises(TypeError):
        Sample()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Sample(1, z=2)  # type: ignore[call-arg]


def test_as_dataclasses_signature_repr_eq_hash() -> None:
    assert list(inspect.signature(Sample).parameters) == list(inspect.signature(Twin).parameters)
    assert repr(Sample(1, "x", (2,), [3])) == repr(Twin(1, "x", (2,), [3])).replace(
        "Twin", "Sample"
    )
    assert Sample(1, e=True) == Sample(1, e=False)  # compare=False is left out
    assert Sample(1) != Sample(2)
    assert Sample(1, "x") != Sample(1, "y")
    assert Sample(1).__eq__(Twin(1)) is NotImplemented  # another class is never equal
    with pytest.raises(TypeError, match="unhashable"):  # a list field, as in dataclasses
        hash(Sample(1))
    endpoint = Endpoint("qmp", "/run/vm.sock")
    assert hash(endpoint) == hash(Endpoint("qmp", "/run/vm.sock", saved=True))
    assert hash(endpoint) == hash(("qmp", "/run/vm.sock", "", None))  # the compared fields


def test_as_dataclasses_frozen() -> None:
    record = Sample(1)
    with pytest.raises(FrozenInstanceError, match="cannot assign to field 'a'"):
        record.a = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        record.new = 1  # type: ignore[attr-defined]
    with pytest.raises(FrozenInstanceError, match="cannot delete field 'a'"):
        del record.a
    assert record.a == 1


def test_post_init_runs_on_construction_and_on_replace() -> None:
    seen: list[int] = []

    @frozen
    class Checked:
        n: int

        def __post_init__(self) -> None:
            seen.append(self.n)
            if self.n < 0:
                raise ValueError("negative")

    record = Checked(1)
    assert replace(record, n=2).n == 2
    assert seen == [1, 2]
    with pytest.raises(ValueError, match="negative"):
        replace(record, n=-1)


def test_replace_keeps_the_other_fields_and_refuses_an_unknown_one() -> None:
    record = Sample(1, "x", (2,), [3], True)
    changed = replace(record, b="y")
    assert (changed.a, changed.b, changed.c, changed.d, changed.e) == (1, "y", (2,), [3], True)
    with pytest.raises(TypeError, match="Sample has no field 'z'"):
        replace(record, z=1)
    assert fields(Sample) == ("a", "b", "c", "d", "e")
    with pytest.raises(TypeError, match="not a frozen record"):
        fields(Twin)


def test_methods_the_class_defines_are_kept() -> None:
    @frozen
    class Own:
        n: int

        def __repr__(self) -> str:
            return "own"

        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return 7

    assert (repr(Own(1)), Own(1) == Own(2), hash(Own(1))) == ("own", True, 7)

    @frozen
    class EqOnly:  # noqa: PLW1641  # Python writes __hash__ = None: made, as dataclasses does
        n: int

        def __eq__(self, other: object) -> bool:
            return False

    assert hash(EqOnly(1)) == hash((1,))


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("class C:\n    a: int = 1\n    b: int\n", "required field 'b' after a default"),
        ("class C:\n    a: list = []\n", "mutable default"),
        ("class C:\n    a: ClassVar[int] = 1\n", "ClassVar and InitVar are not supported"),
        ("class C(Sample):\n    z: int = 1\n", "does not inherit fields"),
        ("class C:\n    F: int\n", "a name the generated __init__ uses"),
        ("class C:\n    self: int\n", "a name the generated __init__ uses"),
    ],
)
def test_what_dataclasses_refuses_or_we_do_not_support_is_refused(
    source: str, message: str
) -> None:
    namespace: dict[str, Any] = {"Sample": Sample, "__name__": __name__}
    exec("from __future__ import annotations\n" + source, namespace)
    with pytest.raises(TypeError, match=message):
        frozen(namespace["C"])


#: Field shapes as a class declares them: a name, and required / a default / a factory.
_shapes = st.lists(
    st.tuples(
        st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True).filter(
            lambda n: n not in {"self", "if", "in", "is", "or", "as", "def", "for", "and", "not"}
        ),
        st.sampled_from(["required", "default", "factory"]),
    ),
    max_size=6,
    unique_by=lambda f: f[0],
).map(lambda fs: sorted(fs, key=lambda f: f[1] != "required"))  # required ones first


@given(_shapes, st.booleans(), st.data())
def test_init_matches_dataclasses_for_any_shape(
    shape: list[tuple[str, str]], post_init: bool, data: st.DataObject
) -> None:
    """The written ``__init__`` (:func:`init_source`) against the one dataclasses writes:
    the same parameters, the same values set, the same defaults, for any declared shape."""
    body = ["from __future__ import annotations"]
    for kind in ("ours", "theirs"):
        body.append(f"@{'frozen' if kind == 'ours' else 'dataclasses.dataclass(frozen=True)'}")
        body.append(f"class {kind.title()}:")
        body.append("    pass")
        fn = "field" if kind == "ours" else "dataclasses.field"
        for name, how in shape:
            default = {"required": "", "default": f" = {name!r}"}.get(how)
            body.append(f"    {name}: object{default or f' = {fn}(default_factory=list)'}")
        if post_init:
            body.append("    def __post_init__(self):")
            body.append("        object.__setattr__(self, '_post', True)")
    namespace: dict[str, Any] = {"frozen": frozen, "field": field, "dataclasses": dataclasses}
    exec("\n".join(body), namespace)
    ours, theirs = namespace["Ours"], namespace["Theirs"]
    params = list(inspect.signature(ours).parameters.values())
    assert [p.name for p in params] == list(inspect.signature(theirs).parameters)
    args = [data.draw(st.integers()) for name, how in shape if how == "required"]
    given_kw = {
        name: data.draw(st.integers())
        for name, how in shape
        if how != "required" and data.draw(st.booleans())
    }
    one, two = ours(*args, **given_kw), theirs(*args, **given_kw)
    assert vars(one) == vars(two)
    assert ("_post" in vars(one)) is post_init
    for p in params:  # the same defaults, a factory's as a marker in both
        theirs_default = inspect.signature(theirs).parameters[p.name].default
        if isinstance(theirs_default, str):
            assert p.default == theirs_default


def test_the_source_names_only_fields_and_its_own_helpers() -> None:
    source = init_source(((("a", "required"), ("b", "default"), ("c", "factory")), True))
    assert source.splitlines()[0] == "def make(D, F):"
    assert "b=D[0]" in source and "c=__frozen_missing" in source
    assert "F[0]() if c is __frozen_missing else c" in source
    assert source.rstrip().endswith("return __init__")
