"""Fixtures of the service tests: one ``kata-mem serve`` per module, and a directory
every user can reach (the service and its clients: tests/support/service.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.service import Service, start


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """One service for a module's tests that need no process of their own."""
    where = tmp_path_factory.mktemp("serve")
    env = {k: v for k, v in os.environ.items() if k not in ("KATA_CONF_FILE", "KATA_MEM_DEBUG")}
    svc = start(where, env=env)
    yield svc
    assert svc.stop() == 0, svc.stderr()


@pytest.fixture
def world_dir() -> Iterator[Path]:
    """A directory every user can reach (pytest's tmp dirs are root's alone), for a
    socket that a client of another uid connects to."""
    where = Path(tempfile.mkdtemp(prefix="kata-mem-serve-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where, ignore_errors=True)
