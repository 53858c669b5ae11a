"""Go's regexp parser as kata_mem.core.gosyntax ports it, against Go's own answers: the
go-parsers table's ``Compile`` rows (tests/unit/test_golang.py), the limits at their edges
here, and, where Go is installed (marker ``go``), every pattern here and a seeded corpus of
generated ones asked of Go's ``regexp.Compile`` itself (:data:`REGEXP_PARSE`), and the
Unicode tables the port reads (scripts/write_go_unicode.py --check)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from kata_mem.core import gosyntax
from tests.support.cases import load_cases
from tests.support.paths import REPO

NESTS = gosyntax.ERR_NESTING_DEPTH
LARGE = gosyntax.ERR_LARGE

#: Patterns at Go's limits, and the code Go refuses each with (None: Go compiles it),
#: each answer Go 1.26.8's (the go-marked test below asks Go again). A limit's error
#: names the whole pattern (parse.go ``parse``: ``&Error{Code: ErrLarge, Expr: s}``).
LIMITS: list[tuple[str, str, Optional[str]]] = [
    # maxHeight 1000: a capture is one level above what it holds.
    ("captures-999-deep", "(" * 999 + "a" + ")" * 999, None),
    ("captures-1000-deep", "(" * 1000 + "a" + ")" * 1000, NESTS),
    ("captures-1001-deep", "(" * 1001 + "a" + ")" * 1001, NESTS),
    # A non-capturing group is no level of its own: Go builds no node for it.
    ("groups-5000-deep", "(?:" * 5000 + "a" + ")" * 5000, None),
    ("flag-groups-1001-deep", "(?i:" * 1001 + "a" + ")" * 1001, None),
    # A repetition is a level.
    ("stars-1200-deep", "(?:" * 1200 + "a*" + ")*" * 1200, NESTS),
    ("quests-1200-deep", "(?:" * 1200 + "a" + ")?" * 1200, NESTS),
    # Alternatives of single runes are one class (factor, round 3): no level.
    ("rune-alternations-1200-deep", "(?:a|" * 1200 + "b" + ")" * 1200, None),
    ("captured-alternations-1001-deep", "(a|" * 1001 + "b" + ")" * 1001, NESTS),
    ("a-deep-group-never-closed", "(" * 1001 + "a", gosyntax.ERR_MISSING_PAREN),
    # maxSize, 3355443 instructions: 3355 x 1000 fit, 3356 x 1000 do not.
    ("size-at-the-limit", "(?:" + "a" * 3355 + "){1000}", None),
    ("size-above-the-limit", "(?:" + "a" * 3356 + "){1000}", LARGE),
    # maxRunes, 33554432 runes in classes: \pL is 659 ranges, 1318 runes, in Go 1.26.
    ("runes-at-the-limit", "\\pL" * 25458, None),
    ("runes-above-the-limit", "\\pL" * 25459, LARGE),
]


@pytest.mark.parametrize(("pattern", "code"), [c[1:] for c in LIMITS], ids=[c[0] for c in LIMITS])
def test_go_refuses_a_pattern_beyond_its_limits(pattern: str, code: Optional[str]) -> None:
    got = gosyntax.parse_error(pattern)
    if code is None:
        assert got is None
        return
    assert got is not None and got.code == code, got
    if code in (NESTS, LARGE):
        assert got.expr == pattern
    assert str(got) == f"error parsing regexp: {code}: `{got.expr}`"


def test_a_deep_pattern_costs_no_python_recursion() -> None:
    # Go recurses through factor, collapse and the size and height walks; the port runs
    # them on its own stack, so Python's recursion limit (1000) is no limit of Go's.
    alternation = "|".join("x" * i for i in range(1, 400))  # factored 398 levels deep
    assert gosyntax.parse_error(alternation) is None
    assert gosyntax.parse_error("(" * 5000 + ")" * 5000) is not None  # nests too deeply


# -- against Go itself ------------------------------------------------------------------------
#: Pieces the corpus is made of: every kind of token the parser reads, and the ones that
#: fold (k, K, the Kelvin sign, the long s), so that literals merge and alternations factor.
TOKENS = [
    "(", ")", "(?:", "(?i)", "(?i:", "(?P<n>", "(?<n>", "(?P<>", "|", "*", "+", "?", "{2}",
    "{1,3}", "{1000}", "{2,}", "{,3}", "{", "}", "{01}", "[", "]", "[^", "-", "a", "b", "A",
    "k", "K", "s", "\u017f", "\u00e9", ".", "^", "$", "\\d", "\\W", "\\pL", "\\p{Greek}",
    "\\PL", "\\p{^Lu}", "\\p{Foo}", "\\p", "\\x41", "\\x{1F600}", "\\x{}", "\\xZ", "\\Q",
    "\\E", "\\b", "\\z", "\\C", "\\1", "\\12", "\\0", "\\", "[:alpha:]", "[[:^digit:]]",
    "[[:foo:]]", "\\p{Letter}", "\\p{Assigned}", "\\pN", "(?U)", "(?s)", "(?m)", "(?-i)",
    "(?i-s:", "(?-)", "(?i-:", "??", "*?", "+?", "\\.", "\\_", "\\q", "ab", "abc", "ac",
    "[a-z]", "[z-a]", "[a-]", "[-a]", "[]a]", "\\n", "x*", "(a|b)", "a|ab|abc", "[Kk]",
    "[k\u212a]", "\u212a", "\\x{10FFFF}", "\\x{110000}",
]  # fmt: skip


def corpus(seed: int = 33, count: int = 4000) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(TOKENS, k=rng.randint(1, 12))) for _ in range(count)]


#: Answers, for each pattern of a JSON array on stdin, what Go's regexp.Compile says of it:
#: "" where Go compiles it, else its error's text (standard library only).
REGEXP_PARSE = """
package main

import (
	"encoding/json"
	"os"
	"regexp"
)

func main() {
	var patterns []string
	if err := json.NewDecoder(os.Stdin).Decode(&patterns); err != nil {
		panic(err)
	}
	answers := make([]string, len(patterns))
	for i, pattern := range patterns {
		if _, err := regexp.Compile(pattern); err != nil {
			answers[i] = err.Error()
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(answers); err != nil {
		panic(err)
	}
}
"""


def go_answers(patterns: list[str], where: Path) -> list[str]:
    """What Go's ``regexp.Compile`` says of each pattern (:data:`REGEXP_PARSE`, run with
    the machine's Go, offline)."""
    (where / "main.go").write_text(REGEXP_PARSE)
    done = subprocess.run(
        ["go", "run", "main.go"],
        cwd=where,
        env={**os.environ, "GOFLAGS": "", "GOPROXY": "off", "GOTOOLCHAIN": "local"},
        input=json.dumps(patterns),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answers: list[str] = json.loads(done.stdout)
    return answers


@pytest.mark.go
def test_the_port_answers_as_go_does(tmp_path: Path) -> None:
    table = [c["input"] for c in load_cases("go-parsers") if c["go"] == "Compile"]
    patterns = [*table, *(c[1] for c in LIMITS), *corpus()]
    wrong = []
    for pattern, want in zip(patterns, go_answers(patterns, tmp_path)):
        got = gosyntax.parse_error(pattern)
        if ("" if got is None else str(got)) != want:
            wrong.append((pattern[:80], want[:120], str(got)[:120]))
    assert not wrong, wrong[:10]


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
