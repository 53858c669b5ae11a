"""The oracles' own Go (tests/oracle/golang, tests/oracle/kubernetes at both releases):
formatted, vetted, and their module files tidy, offline, with the modules the oracles' build
put in Go's caches (the ``oracle_programs`` fixture builds them first)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = [pytest.mark.go, pytest.mark.oracle, pytest.mark.timeout(900)]
ORACLES = REPO / "tests" / "oracle"

#: Each check: the module's directory and the command (both Kubernetes releases are vetted:
#: the 1.35 build is another module file and another tag).
CHECKS = {
    "gofmt": ("", ("gofmt", "-l", "golang", "kubernetes")),
    "go vet golang": ("golang", ("go", "vet", ".")),
    "go vet kubernetes 1.37": ("kubernetes", ("go", "vet", ".")),
    "go vet kubernetes 1.35": (
        "kubernetes",
        ("go", "vet", "-modfile=kubernetes-1.35.mod", "-tags", "kube1.35", "."),
    ),
    "go mod tidy golang": ("golang", ("go", "mod", "tidy", "-diff")),
    "go mod tidy kubernetes 1.37": ("kubernetes", ("go", "mod", "tidy", "-diff")),
    "go mod tidy kubernetes 1.35": (
        "kubernetes",
        ("go", "mod", "tidy", "-diff", "-modfile=kubernetes-1.35.mod"),
    ),
}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_the_oracles_go_is_formatted_vetted_and_tidy(
    oracle_programs: dict[str, Path], check: str
) -> None:
    where, argv = CHECKS[check]
    env = {**os.environ, "GOFLAGS": "-mod=readonly", "GOPROXY": "off", "GOTOOLCHAIN": "local"}
    done = subprocess.run(
        argv, cwd=ORACLES / where, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
