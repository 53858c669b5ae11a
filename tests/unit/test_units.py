"""kata_mem.core.units holds the byte units, the 64-bit limits and every rounding to MiB or KiB:
each has one name and one meaning, and no other module does its own."""

from __future__ import annotations

import ast

import pytest

from kata_mem.core.units import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    KiB,
    MiB,
    fmt_bytes,
    to_kib_floor,
    to_mib_ceil,
    to_mib_floor,
    to_mib_nearest,
)
from tests.support.paths import REPO

#: Files exempted from the rounding and int64 rules while they are rewritten (none now).
PENDING_ROUNDING: set[str] = set()
PENDING_INT64: set[str] = set()


def _modules(skip: set[str]) -> list[tuple[str, ast.Module]]:
    return [
        (rel, ast.parse(path.read_text()))
        for path in sorted((REPO / "kata_mem").rglob("*.py"))
        if (rel := str(path.relative_to(REPO))) not in skip and rel != "kata_mem/core/units.py"
    ]


@pytest.mark.parametrize(
    ("n", "floor", "ceil", "nearest"),
    [
        (0, 0, 0, 0),
        (1, 0, 1, 0),
        (MiB // 2 - 1, 0, 1, 0),
        (MiB // 2, 0, 1, 1),
        (MiB, 1, 1, 1),
        (3 * MiB + 1, 3, 4, 3),
        (-MiB - 1, -2, -1, -1),
    ],
)
def test_mib_rounding(n: int, floor: int, ceil: int, nearest: int) -> None:
    assert (to_mib_floor(n), to_mib_ceil(n), to_mib_nearest(n)) == (floor, ceil, nearest)


def test_kib_and_formatting() -> None:
    assert (to_kib_floor(2 * MiB), to_kib_floor(KiB - 1)) == (2048, 0)
    # Always MiB (a message once said "clamped to 25276637184 B"); a part of one never reads as whole.
    assert (fmt_bytes(3 * MiB), fmt_bytes(MiB + 1)) == ("3 MiB", "1.01 MiB")
    assert (fmt_bytes(2000 * MiB + MiB // 2), fmt_bytes(-MiB - 1)) == ("2000.50 MiB", "-1.01 MiB")
    assert (INT64_MIN, INT64_MAX, UINT64_MAX) == (-(2**63), 2**63 - 1, 2**64 - 1)


def _defines_a_64_bit_limit(node: ast.AST) -> bool:
    return isinstance(node, ast.Assign) and any(
        getattr(t, "id", "").lstrip("_").startswith(("INT64", "UINT64")) for t in node.targets
    )


def test_the_64_bit_limits_are_defined_once() -> None:
    defined = [
        f"{rel}:{getattr(node, 'lineno', 0)}"
        for rel, tree in _modules(PENDING_INT64)
        for node in ast.walk(tree)
        if _defines_a_64_bit_limit(node)
    ]
    assert defined == [], "import INT64_MIN, INT64_MAX, UINT64_MAX from kata_mem.core.units"


def _rounds_to_a_unit(node: ast.AST) -> bool:
    """``n >> 20``, ``n >> 10``, ``n // MiB``, ``n // KiB``, ``n // 1024``: a rounding
    that belongs in kata_mem.core.units."""
    if not isinstance(node, ast.BinOp):
        return False
    right = node.right
    if isinstance(node.op, ast.RShift):
        return isinstance(right, ast.Constant) and right.value in (10, 20, 30)
    if isinstance(node.op, ast.FloorDiv):
        return getattr(right, "id", None) in ("KiB", "MiB", "GiB") or (
            isinstance(right, ast.Constant) and right.value in (1024, 1 << 20)
        )
    return False


def test_no_module_rounds_to_mib_or_kib_by_itself() -> None:
    found = [
        f"{rel}:{getattr(node, 'lineno', 0)}"
        for rel, tree in _modules(PENDING_ROUNDING)
        for node in ast.walk(tree)
        if _rounds_to_a_unit(node)
    ]
    assert found == [], "round through kata_mem.core.units (to_mib_floor, to_mib_ceil, ...)"


def test_the_scans_see_what_they_look_for() -> None:
    # The scans above pass on an empty list: check that they would find something.
    tree = ast.parse("a = n >> 20\nb = n // MiB\nc = n // 1024\nd = n // 7\n_INT64 = 1 << 63\n")
    nodes = list(ast.walk(tree))
    assert sum(map(_rounds_to_a_unit, nodes)) == 3
    assert sum(map(_defines_a_64_bit_limit, nodes)) == 1
