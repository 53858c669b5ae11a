"""Rules the test suite keeps about itself: no test that cannot fail, nothing shared
through a test module or a conftest, waits instead of sleeps, and example counts from the
hypothesis profile."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from tests.support.paths import REPO

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


# -- what tests share, they share through tests/support and tests/strategies ---------------

#: The modules of the tests package that anything may import: plain modules, never a
#: test module (importing one runs its tests' module code again, and binds a change
#: there to every importer) nor a conftest (pytest loads those itself).
SHARED = ("tests.support", "tests.strategies")


def _imported(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Each module of the tests package that ``tree`` imports, with its line; a relative
    import shows as ``.``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (
                (node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "tests"
            )
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield node.lineno, "." * node.level + (node.module or "")
            elif node.module == "tests":
                yield from ((node.lineno, f"tests.{a.name}") for a in node.names)
            elif node.module and node.module.split(".")[0] == "tests":
                yield node.lineno, node.module


def _shared(module: str) -> bool:
    return any(module == m or module.startswith(f"{m}.") for m in SHARED)


def test_nothing_imports_a_test_module_or_a_conftest() -> None:
    sources = [*(REPO / "tests").rglob("*.py"), *(REPO / "scripts").rglob("*.py")]
    found = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in sorted(sources)
        for line, module in _imported(ast.parse(path.read_text()))
        if not _shared(module)
    ]
    assert found == [], "import what tests share from tests/support or tests/strategies.py"


def test_the_import_rule_sees_what_it_looks_for() -> None:
    source = (
        "import tests.conftest\n"
        "from tests.cli.test_shim import request\n"
        "from tests import conftest, support\n"
        "from .conftest import x\n"
        "def f():\n    from tests.service.conftest import start\n"
        "from tests.support.paths import REPO\n"
        "from tests.strategies import hosts\n"
        "import tests.support.waits\n"
    )
    modules = [m for _, m in _imported(ast.parse(source))]
    assert [m for m in modules if not _shared(m)] == [
        "tests.conftest",
        "tests.cli.test_shim",
        "tests.conftest",
        ".conftest",
        "tests.service.conftest",
    ]
    assert len(modules) == 9


# -- waits, not sleeps -----------------------------------------------------------------------

#: Said in a comment on a sleep's line, or in the comment just above it: the sleep is
#: not a wait for something (a slow client or guest is what the test is about).
NOT_A_WAIT = "not a wait:"


def _sleeps(source: str) -> Iterator[int]:
    """The lines of the sleeps in ``source`` that do not say they are not a wait."""
    lines = source.splitlines()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "sleep"
        ):
            above = node.lineno - 1
            comment = [lines[above]]
            while above > 0 and lines[above - 1].strip().startswith("#"):
                above -= 1
                comment.append(lines[above])
            if not any(NOT_A_WAIT in line for line in comment):
                yield node.lineno


def test_tests_wait_for_a_condition_instead_of_sleeping() -> None:
    """A fixed sleep is too short on a loaded machine and too long on an idle one: wait
    for what the sleep hoped for (tests/support/waits.py, wait_until). The harnesses in
    tests/support poll with sleeps of their own."""
    support = REPO / "tests" / "support"
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        if support not in path.parents
        for line in _sleeps(path.read_text())
    ]
    assert found == [], f"wait_until(condition, what), or say '# {NOT_A_WAIT} why'"


def test_the_sleep_rule_sees_what_it_looks_for() -> None:
    source = (
        "import time\n"
        "time.sleep(0.5)  # the apply is waiting now\n"
        "time.sleep(1)  # not a wait: a slow client\n"
        "# not a wait: the slow guest\n# is what this test is about\n"
        "time.sleep(2)\n"
        "# a comment\n\n"
        "sleep(3)\n"
        "code = 'time.sleep(60)'\n"
    )
    assert list(_sleeps(source)) == [2, 9]


# -- hypothesis: the profile says how many examples ------------------------------------------


def _example_counts(tree: ast.AST) -> Iterator[int]:
    """The lines that give ``max_examples`` as a number."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.keyword)
            and node.arg == "max_examples"
            and isinstance(node.value, ast.Constant)
        ):
            yield node.value.lineno


def test_the_hypothesis_profile_sets_the_number_of_examples() -> None:
    """tests/conftest.py registers a quick profile and the full one; a test that needs
    more or fewer examples than most asks for a multiple of the profile's
    (tests.strategies.examples), so that the quick profile stays quick."""
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "tests").rglob("*.py"))
        for line in _example_counts(ast.parse(path.read_text()))
    ]
    assert found == [], "max_examples=examples(N) or the profile's own"


def test_the_examples_rule_sees_what_it_looks_for() -> None:
    source = "@settings(max_examples=50)\ndef f(): ...\ns = settings(max_examples=examples(2))\n"
    assert list(_example_counts(ast.parse(source))) == [1]
