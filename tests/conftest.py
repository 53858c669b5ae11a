"""Fixtures for every test directory. What the tests share besides fixtures (helpers,
constants, strategies) lives in plain modules, ``tests/support/`` and
``tests/strategies.py``, that tests import; no test imports a conftest or another test
module (tests/unit/test_suite_rules.py holds the suite to that).

* ``make_config``: ``make_config(**keys) -> SizingConfig`` through the real loader.
* ``run_cli``: ``run_cli(*args) -> CliResult``, the CLI in-process as a user runs it.
* ``lock_holder``: ``lock_holder(lock) -> Popen``, another process holding a sandbox's lock.
* ``guest_dir`` (session): builds (or reuses) the test guest's kernel and initramfs with
  ``scripts/build-guest.sh`` into ``$KATA_MEM_GUEST_DIR`` (default ``<repo>/.cache/guest``).
  Missing QEMU is a failure, not a skip. The other guest fixtures are in
  ``tests/integration/conftest.py``.

The hypothesis profiles are registered here: ``HYPOTHESIS_PROFILE=ci`` (or pytest's
``--hypothesis-profile ci``) runs the full one, the default ``dev`` a quick one.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.model import SizingConfig
from kata_mem.edges.config import load_config
from kata_mem.interfaces.main import main
from tests.support.cli import CliResult, Run
from tests.support.configs import write_config
from tests.support.guestvm import QEMU_BINARY
from tests.support.paths import REPO
from tests.support.state_dir import LockHolder, lock_holders

#: Examples per property test in each hypothesis profile: "dev", the default, is quick for
#: working on the code; "ci" is the full run, which scripts/test selects. A test whose
#: examples cost much more or less than most asks for a multiple (tests.strategies.examples).
PROFILES = {"dev": 10, "ci": 100}

# Guarded: the real-guest module that scripts/test-pythons runs on further Pythons has the
# test-qmp extra only (pyproject.toml), without hypothesis.
if importlib.util.find_spec("hypothesis") is not None:
    from hypothesis import HealthCheck, settings

    for _name, _examples in PROFILES.items():
        # too_slow and the deadline are timing checks: on a loaded 2-core CI machine they
        # fail for reasons that say nothing about the code (speed is measured in scripts/).
        settings.register_profile(
            _name,
            max_examples=_examples,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
    # Loaded before any test module is collected, so that their @settings see it;
    # pytest's --hypothesis-profile, read later, wins over the variable.
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., SizingConfig]:
    def build(**keys: Any) -> SizingConfig:
        runtime = {}
        if "static_sandbox_resource_mgmt" in keys:
            runtime["static_sandbox_resource_mgmt"] = keys.pop("static_sandbox_resource_mgmt")
        settings = keys.pop("kata_mem", None)
        return load_config(write_config(tmp_path / "configuration.toml", keys, runtime, settings))

    return build


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    monkeypatch.delenv("KATA_CONF_FILE", raising=False)
    monkeypatch.delenv("KATA_MEM_DEBUG", raising=False)

    def run(*args: str) -> CliResult:
        capsys.readouterr()  # drop whatever fixtures printed before the command
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    yield run


@pytest.fixture
def lock_holder() -> Iterator[LockHolder]:
    """Another process that holds the flock on a sandbox's lock file until the test ends."""
    with lock_holders() as hold:
        yield hold


@pytest.fixture(scope="session")
def guest_dir() -> Path:
    """Directory with ``vmlinuz`` and ``initramfs.gz`` of the test guest."""
    build_script = REPO / "scripts" / "build-guest.sh"
    qemu = os.environ.get("KATA_MEM_QEMU") or QEMU_BINARY
    if shutil.which(qemu) is None:
        pytest.fail(
            f"{qemu} not found: the guest tests need QEMU. "
            "Run `sudo scripts/install-system-deps.sh` first.",
            pytrace=False,
        )
    out = Path(os.environ.get("KATA_MEM_GUEST_DIR") or REPO / ".cache" / "guest")
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(build_script), str(out)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{build_script.relative_to(REPO)} {out} failed (exit {proc.returncode}); "
            "missing tools? run `sudo scripts/install-system-deps.sh`\n"
            f"--- stderr ---\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    elapsed = time.monotonic() - t0
    if elapsed > 1.0:
        print(f"\nbuilt test guest in {out} ({elapsed:.1f} s)")
    return out
