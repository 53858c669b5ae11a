#!/usr/bin/env python3
"""Write kata_mem/core/gounicode.py: Go's Unicode tables, as Go's regexp/syntax reads them.

kata_mem.core.gosyntax parses an ``enable_annotations`` pattern as Go's regexp/syntax
does, and what Go's parser builds from ``\\p{Greek}``, ``(?i)k`` or ``[[:^alpha:]]``
depends on Go's own tables (package unicode: ``Categories``, ``Scripts``,
``FoldCategory``, ``FoldScript``, ``CategoryAliases``, ``Cn`` and ``SimpleFold``), whose
Unicode version is the Go release's, not Python's. This script asks the Go toolchain on
the machine for them (a throwaway program, standard library only, offline) and writes
them as a module; run it when the Go that Kata is built with moves to another Unicode
version. Needs Go (scripts/install-system-deps.sh go).

    .venv/bin/python scripts/write_go_unicode.py [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "kata_mem" / "core" / "gounicode.py"

#: Prints the tables as JSON: each table as [lo, hi, stride] triples, R16 then R32, as
#: regexp/syntax appendTable walks them; SimpleFold as [rune, fold] for every rune it moves.
DUMP = r"""
package main

import (
	"encoding/json"
	"os"
	"runtime"
	"unicode"
)

func flat(t *unicode.RangeTable) [][3]int {
	out := [][3]int{}
	for _, r := range t.R16 {
		out = append(out, [3]int{int(r.Lo), int(r.Hi), int(r.Stride)})
	}
	for _, r := range t.R32 {
		out = append(out, [3]int{int(r.Lo), int(r.Hi), int(r.Stride)})
	}
	return out
}

func flatAll(m map[string]*unicode.RangeTable) map[string][][3]int {
	out := map[string][][3]int{}
	for name, t := range m {
		out[name] = flat(t)
	}
	return out
}

func main() {
	folds := [][2]int{}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if f := unicode.SimpleFold(r); f != r {
			folds = append(folds, [2]int{int(r), int(f)})
		}
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"go":               runtime.Version(),
		"unicode":          unicode.Version,
		"folds":            folds,
		"categories":       flatAll(unicode.Categories),
		"scripts":          flatAll(unicode.Scripts),
		"fold_category":    flatAll(unicode.FoldCategory),
		"fold_script":      flatAll(unicode.FoldScript),
		"category_aliases": unicode.CategoryAliases,
		"cn":               flat(unicode.Cn),
	})
}
"""


def dump() -> dict[str, Any]:
    """The tables, from the machine's Go (offline: no module is needed)."""
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "main.go").write_text(DUMP)
        env = {**os.environ, "GOFLAGS": "", "GOPROXY": "off", "GOTOOLCHAIN": "local"}
        done = subprocess.run(
            ["go", "run", "main.go"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"go run failed: {done.stderr.strip()}")
    tables: dict[str, Any] = json.loads(done.stdout)
    return tables


def _q(text: str) -> str:
    """A string literal as ruff formats one (double quotes; the tables are ASCII)."""
    return json.dumps(text)


def _table(triples: list[list[int]]) -> str:
    return " ".join(f"{lo:x},{hi:x},{stride:x}" for lo, hi, stride in triples)


def _tables(name: str, about: str, tables: dict[str, list[list[int]]]) -> list[str]:
    lines = [f"#: {about}", f"{name}: dict[str, str] = {{"]
    lines += [f"    {_q(key)}: {_q(_table(tables[key]))}," for key in sorted(tables)]
    return [*lines, "}"]


def module(tables: dict[str, Any]) -> str:
    folds = " ".join(f"{r:x}:{f:x}" for r, f in tables["folds"])
    aliases = tables["category_aliases"]
    lines = [
        '"""Go\'s Unicode tables as its regexp/syntax parser reads them '
        f"({tables['go']}, Unicode {tables['unicode']}).",
        "",
        "Written by scripts/write_go_unicode.py from the Go toolchain's package unicode; do not",
        "edit (tests/unit/test_gosyntax.py asks Go whether it is still what the script writes).",
        "Each table is Go's ``unicode.RangeTable``: ``lo,hi,stride`` triples in hexadecimal,",
        "its R16 ranges then its R32 ones, as regexp/syntax ``appendTable`` walks them.",
        "Pure data, read by kata_mem.core.gosyntax only when a pattern needs it.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        f"GO_VERSION = {_q(tables['go'])}",
        f"UNICODE_VERSION = {_q(tables['unicode'])}",
        "#: ``unicode.SimpleFold(r)`` for every rune it moves, ``rune:fold`` in hexadecimal.",
        f"FOLDS = {_q(folds)}",
        "#: ``unicode.Cn``: the unassigned code points (``\\p{Assigned}`` is its negation).",
        f"CN = {_q(_table(tables['cn']))}",
        *_tables("CATEGORIES", "``unicode.Categories``.", tables["categories"]),
        *_tables("SCRIPTS", "``unicode.Scripts``.", tables["scripts"]),
        *_tables("FOLD_CATEGORY", "``unicode.FoldCategory``.", tables["fold_category"]),
        *_tables("FOLD_SCRIPT", "``unicode.FoldScript``.", tables["fold_script"]),
        "#: ``unicode.CategoryAliases``: long names of the categories.",
        "CATEGORY_ALIASES: dict[str, str] = {",
        *(f"    {_q(key)}: {_q(aliases[key])}," for key in sorted(aliases)),
        "}",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args()
    text = module(dump())
    if args.check:
        if TARGET.read_text() != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run scripts/write_go_unicode.py")
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
