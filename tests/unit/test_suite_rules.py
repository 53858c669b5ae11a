"""Rules the test suite keeps about itself: no test that cannot fail."""

from __future__ import annotations

import ast

from tests.conftest import REPO

#: Helpers that return a value that is always true (or raise): asserting on the call
#: itself checks nothing, so assert on a field of what they return.
ALWAYS_TRUE = {"wait_mem"}


def _asserts_an_always_true_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Assert)
        and isinstance(node.test, ast.Call)
        and getattr(node.test.func, "attr", getattr(node.test.func, "id", None)) in ALWAYS_TRUE
    )


def test_no_assert_on_a_call_that_is_always_true() -> None:
    found = [
        f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if _asserts_an_always_true_call(node)
    ]
    assert found == [], "assert on the value wait_mem returns, e.g. .total_kb == ..."


def test_the_rule_sees_what_it_looks_for() -> None:
    tree = ast.parse("assert vm.wait_mem(p)\nassert vm.wait_mem(p).total_kb == 1\n")
    assert [_asserts_an_always_true_call(n) for n in tree.body] == [True, False]
