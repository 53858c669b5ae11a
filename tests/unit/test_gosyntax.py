"""Go's regexp parser as kata_mem.core.gosyntax ports it, against Go's own answers: the
go-parsers table's ``Compile`` rows (tests/unit/test_golang.py), the limits at their edges
(``tests.strategies.GO_REGEXP_LIMITS``), and, where Go is installed (marker ``go``), the
Unicode tables the port reads (scripts/write_go_unicode.py --check). Go's ``regexp.Compile``
itself answers for every pattern here and a seeded corpus in tests/oracle/test_golang_oracle.py
(the go-oracle program, built once with the other oracles)."""

from __future__ import annotations

import subprocess
import sys
from typing import Optional

import pytest

from kata_mem.core import gosyntax
from tests.strategies import GO_REGEXP_LIMITS
from tests.support.paths import REPO


@pytest.mark.parametrize(
    ("pattern", "code"), [c[1:] for c in GO_REGEXP_LIMITS], ids=[c[0] for c in GO_REGEXP_LIMITS]
)
def test_go_refuses_a_pattern_beyond_its_limits(pattern: str, code: Optional[str]) -> None:
    got = gosyntax.parse_error(pattern)
    if code is None:
        assert got is None
        return
    assert got is not None and got.code == code, got
    if code in (gosyntax.ERR_NESTING_DEPTH, gosyntax.ERR_LARGE):
        assert got.expr == pattern
    assert str(got) == f"error parsing regexp: {code}: `{got.expr}`"


def test_a_deep_pattern_costs_no_python_recursion() -> None:
    # Go recurses through factor, collapse and the size and height walks; the port runs
    # them on its own stack, so Python's recursion limit (1000) is no limit of Go's.
    alternation = "|".join("x" * i for i in range(1, 400))  # factored 398 levels deep
    assert gosyntax.parse_error(alternation) is None
    assert gosyntax.parse_error("(" * 5000 + ")" * 5000) is not None  # nests too deeply


# -- against Go itself ------------------------------------------------------------------------


@pytest.mark.go
def test_the_unicode_tables_are_gos() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "write_go_unicode.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
