"""The Go module (go/: the client and the NRI plugin): gofmt, go vet and go test, whose
tests start a real ``kata-mem serve`` of this tree (this Python runs it) and check the
structs against the shipped schemas. Offline: no module proxy, the local toolchain, the
modules scripts/build-go.sh downloaded at the pinned versions, Go's own caches."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.paths import REPO

pytestmark = pytest.mark.go
GO = REPO / "go"


def go_env() -> dict[str, str]:
    """Offline, with the machine's Go and Go's own caches, where scripts/build-go.sh put
    the module's dependencies at their pins."""
    return {
        **os.environ,
        "GOFLAGS": "-mod=readonly",
        "GOPROXY": "off",
        "GOTOOLCHAIN": "local",
        "KATA_MEM_PYTHON": sys.executable,
    }


def go(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=GO, env=go_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize(
    "argv", [("gofmt", "-l", "."), ("go", "vet", "./...")], ids=["gofmt -l", "go vet"]
)
def test_the_go_client_is_formatted_and_vetted(argv: tuple[str, ...]) -> None:
    done = go(*argv)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_go_test_passes_against_a_real_service() -> None:
    done = go("go", "test", "-count=1", "./...", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    # Every package with tests ran them (none was skipped for want of a service).
    for package in ("kata-mem/client", "kata-mem/client/example", "kata-mem/nriplugin"):
        assert f"ok  \t{package}\t" in done.stdout, done.stdout
