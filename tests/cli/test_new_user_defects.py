"""Defects a new user found (issue 24, defects 5 and 8): each test drives the command line
as the user did and pins the new wording; each failed on the code before."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from tests.support.cli import CliResult
from tests.support.configs import HOST_ARGS, write_config

Run = Callable[..., CliResult]


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return write_config(tmp_path / "c.toml", kata_mem={"state_dir": str(tmp_path / "state")})


@pytest.mark.parametrize("cpus", ["1e41", "1e100", "1e400", "9223372036854775.808"])
def test_cpus_beyond_int64_millicores_are_refused(run_cli: Run, cfg: Path, cpus: str) -> None:
    # Before: capped at 10^40 and planned, each shown as "containers = 1e+40", where a
    # memory size above int64 is refused.
    r = run_cli("preview", "--config", str(cfg), "--cpu", cpus, *HOST_ARGS)
    assert r.code == 4, r.err
    assert r.err.strip() == (
        f"kata-mem: error: --cpu {cpus!r}: above 9223372036854775807m (9.223e+15 CPUs); "
        "expected CPUs whose millicores a signed 64-bit integer holds, as the kubelet reads "
        "a CPU limit"
    )


def test_cpus_at_the_bound_are_planned(run_cli: Run, cfg: Path) -> None:
    r = run_cli("preview", "--config", str(cfg), "--cpu", "9223372036854775807m", *HOST_ARGS)
    assert r.code == 0, r.err
