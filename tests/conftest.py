"""Shared test helpers: building configurations through the real loader, and
running the CLI in-process the way a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import pytest

from kata_mem.core.model import HostFacts, SizingConfig
from kata_mem.core.quantity import format_quantity
from kata_mem.core.units import GiB
from kata_mem.edges.config import load_config
from kata_mem.interfaces.main import main

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
KATA_CONFIGS = FIXTURES / "kata-configs"
PODS = REPO / "examples" / "pods"


def shim_request_doc(cfg: Path, **fields: Any) -> dict[str, Any]:
    """A plan-only shim request for one 1 GiB container on a 16 GiB, 4-CPU host."""
    doc: dict[str, Any] = {
        "schema": "kata-mem/shim-request/v1",
        "sandbox_id": "sb-1",
        "event": "update",
        "config": str(cfg),
        "containers": [{"id": "c1", "memory_limit_bytes": 1 << 30}],
        "host": {"memory_bytes": 16 << 30, "cpus": 4},
    }
    doc.update(fields)
    return doc


#: The host the tests plan for unless they say otherwise, so that no plan depends on the
#: machine: as host facts, and as the command-line options that give the same host.
HOST = HostFacts(memory=16 * GiB, cpus=4, arch="amd64")
HOST_ARGS = (
    *("--host-memory", format_quantity(Fraction(HOST.memory))),
    *("--host-cpus", str(HOST.cpus)),
    *("--host-arch", HOST.arch),
)


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def write_config(
    path: Path,
    hypervisor: Mapping[str, Any] | None = None,
    runtime: Mapping[str, Any] | None = None,
    kata_mem: Mapping[str, Any] | None = None,
    name: str = "qemu",
) -> Path:
    """A minimal Kata configuration with the given sizing keys (unset: Kata defaults)."""
    lines = [f"[hypervisor.{name}]", 'path = "/usr/bin/qemu-system-x86_64"']
    lines += [f"{k} = {toml_value(v)}" for k, v in (hypervisor or {}).items()]
    if runtime:
        lines += ["[runtime]", *(f"{k} = {toml_value(v)}" for k, v in runtime.items())]
    if kata_mem:
        lines += ["[kata_mem]", *(f"{k} = {toml_value(v)}" for k, v in kata_mem.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., SizingConfig]:
    def build(**keys: Any) -> SizingConfig:
        runtime = {}
        if "static_sandbox_resource_mgmt" in keys:
            runtime["static_sandbox_resource_mgmt"] = keys.pop("static_sandbox_resource_mgmt")
        settings = keys.pop("kata_mem", None)
        return load_config(write_config(tmp_path / "configuration.toml", keys, runtime, settings))

    return build


@dataclass(frozen=True)
class CliResult:
    code: int
    out: str
    err: str


def guest_config(
    tmp_path: Path,
    *,
    virtio: bool,
    maxmem: int = 4096,
    slots: int = 8,
    timeout: int = 20,
    **kata_mem: Any,
) -> Path:
    """The configuration of the tests' guest: 512 MiB at boot, state under ``tmp_path``;
    ``kata_mem`` adds ``[kata_mem]`` settings."""
    return write_config(
        tmp_path / "configuration.toml",
        {
            "default_memory": 512,
            "default_maxmemory": maxmem,
            "memory_slots": slots,
            "enable_virtio_mem": virtio,
        },
        kata_mem={"state_dir": str(tmp_path / "state"), "step_timeout_s": timeout, **kata_mem},
    )


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


def apply_qmp(
    run_cli: Callable[..., CliResult], cfg: Path, sock: Path, *args: str
) -> tuple[int, dict[str, Any]]:
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


@pytest.fixture
def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., CliResult]]:
    monkeypatch.delenv("KATA_CONF_FILE", raising=False)
    monkeypatch.delenv("KATA_MEM_DEBUG", raising=False)

    def run(*args: str) -> CliResult:
        capsys.readouterr()  # drop whatever fixtures printed before the command
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    yield run
