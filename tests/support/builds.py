"""Running a build script of scripts/ from a test: the node rig's and the oracles' (each
caches its output and builds only what is missing)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

from tests.support.paths import REPO


def build(script: Path, out: Path) -> Optional[str]:
    """Run ``script out``; None when it succeeded, else what failed and the end of its
    output (no Go, a module the proxy does not serve, ...)."""
    done = subprocess.run(
        [str(script), str(out)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode == 0:
        return None
    return (
        f"{script.relative_to(REPO)} {out} failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
    )
