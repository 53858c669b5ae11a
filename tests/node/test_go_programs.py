"""The Go test programs of the node rig (tests/go) and its pin modules (tests/rig): gofmt,
go vet, and pins that are upstream's own. Offline (GOPROXY=off): the ``rig`` fixture's build
has put every module in Go's module cache."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.node import Rig, pinned_version
from tests.support.paths import REPO

# The first test's setup may build the rig from cold caches: minutes on 2 cores
# (scripts/build-node-rig.sh; the tests after it find it built).
pytestmark = [pytest.mark.node, pytest.mark.timeout(900)]
GO_PROGRAMS = REPO / "tests" / "go"
PINS = {
    "containerd-v2.3": "github.com/containerd/containerd/v2",
    "containerd-v2.4": "github.com/containerd/containerd/v2",
    "cri-tools": "sigs.k8s.io/cri-tools",
}


def go(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize(
    "argv", [("gofmt", "-l", "."), ("go", "vet", "./...")], ids=["gofmt -l", "go vet"]
)
def test_the_go_programs_are_formatted_and_vetted(rig: Rig, argv: tuple[str, ...]) -> None:
    done = go(*argv, cwd=GO_PROGRAMS)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize("pin", sorted(PINS))
def test_a_pin_module_builds_with_upstreams_own_dependency_versions(rig: Rig, pin: str) -> None:
    """Each module tests/rig pins requires only the upstream module, so what is built is
    what upstream's go.mod (no replace directives) selects: every module a built package
    comes from is at the version upstream's go.mod requires."""
    module_dir = REPO / "tests" / "rig" / pin
    upstream = PINS[pin]
    listed = go("go", "list", "-m", "-json", upstream, cwd=module_dir)
    assert listed.returncode == 0, listed.stderr
    upstream_mod = json.loads(listed.stdout)["GoMod"]
    edit = go("go", "mod", "edit", "-json", upstream_mod, cwd=module_dir)
    assert edit.returncode == 0, edit.stderr
    upstream_go_mod = json.loads(edit.stdout)
    assert upstream_go_mod.get("Replace") is None
    wanted = {r["Path"]: r["Version"] for r in upstream_go_mod["Require"]}
    deps = go(
        "go",
        "list",
        "-deps",
        "-tags",
        "no_btrfs no_devmapper no_zfs",
        "-f",
        "{{with .Module}}{{.Path}} {{.Version}}{{end}}",
        "tool",
        cwd=module_dir,
    )
    assert deps.returncode == 0, deps.stderr
    built = dict(line.split() for line in set(deps.stdout.splitlines()) if line)
    assert built.pop(upstream) == pinned_version(module_dir, upstream)
    assert {p: v for p, v in built.items() if wanted.get(p) != v} == {}
