"""kata-mem's command line, as the tests run it: in-process (the ``run_cli`` fixture) and
as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.configs import HOST_ARGS
from tests.support.paths import REPO


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


#: The ``run_cli`` fixture: ``run_cli(*args)`` runs ``kata-mem ARGS`` in-process.
Run = Callable[..., CliResult]


def kata_mem_process(
    *args: str, input: str | None = None, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m kata_mem ARGS`` as a real process from the repository root (``env`` is
    added to this process's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "kata_mem", *args],
        input=input,
        env=None if env is None else {**os.environ, **env},
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        check=False,
    )


def apply_qmp(run_cli: Run, cfg: Path, sock: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """``kata-mem apply --json`` on sandbox ``sb`` through a QMP socket: exit code and outcome."""
    r = run_cli(
        "apply",
        "--config",
        str(cfg),
        "--qmp",
        str(sock),
        "--sandbox",
        "sb",
        *HOST_ARGS,
        "--json",
        *args,
    )
    assert r.out.strip(), r.err
    doc: dict[str, Any] = json.loads(r.out)
    return r.code, doc
