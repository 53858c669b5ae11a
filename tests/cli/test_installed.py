"""The kata-mem a user gets from ``pip install kata-mem``: the wheel (built from the
sdist), installed without extras into a clean virtualenv, run as a real process from
outside the checkout.

``scripts/test`` builds and installs it (scripts/install-wheel.sh) and names the
program in ``KATA_MEM_INSTALLED_BIN``. Without that variable these tests build and
install it themselves (about a minute): they never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import kata_mem
from tests.support.configs import write_config
from tests.support.paths import PODS, REPO
from tests.support.shim import shim_request_doc

pytestmark = pytest.mark.installed

CONFIGS = sorted((REPO / "configs").glob("*.toml"))
SCHEMAS = REPO / "kata_mem" / "schemas"
HOST = ("--host-memory", "31753Mi", "--host-cpus", "8")
Run = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("KATA_MEM_INSTALLED_BIN")
    if given:
        path = Path(given)
        assert path.is_file() and os.access(path, os.X_OK), (
            f"KATA_MEM_INSTALLED_BIN={given}: no such program"
        )
        return path
    dest = tmp_path_factory.mktemp("installed")
    r = subprocess.run(
        [str(REPO / "scripts" / "install-wheel.sh"), sys.prefix, str(dest)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, (
        f"scripts/install-wheel.sh failed (it needs `build`, from the test extra):\n{r.stderr}"
    )
    return Path(r.stdout.strip())


@pytest.fixture
def run(program: Path, tmp_path: Path) -> Run:
    """Run the installed kata-mem in ``tmp_path``, where no checkout can be imported."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "KATA_CONF_FILE", "KATA_MEM_DEBUG", "VIRTUAL_ENV")
    }

    def go(*args: str, input: str | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(program), *args],
            input=input,
            env={**env, **extra},
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
            check=False,
        )

    return go


def config(tmp_path: Path) -> Path:
    """A configuration whose state directory is under ``tmp_path``."""
    return write_config(
        tmp_path / "configuration.toml",
        {"default_memory": 2048},
        kata_mem={"state_dir": str(tmp_path / "state")},
    )


def test_it_is_the_wheel_without_extras(program: Path, tmp_path: Path) -> None:
    python = program.parent / "python"
    probe = (
        "import importlib.util, kata_mem\n"
        "print(kata_mem.__file__)\n"
        "print(importlib.util.find_spec('libvirt'), importlib.util.find_spec('qemu.qmp') is not None)\n"
    )
    r = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert r.returncode == 0, r.stderr
    where, found = r.stdout.splitlines()
    venv = program.parent.parent.resolve()
    assert Path(where).resolve().is_relative_to(venv), where  # not the checkout
    assert found == "None True"  # no libvirt-python (no extra); qemu.qmp (a dependency)


def test_version(run: Run) -> None:
    r = run("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"kata-mem, version {kata_mem.__version__}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c.name for c in CONFIGS])
def test_preview_of_the_bundled_configs(run: Run, cfg: Path) -> None:
    r = run("preview", "--config", str(cfg), "--pod", str(PODS / "memory-boom.yaml"), *HOST)
    assert r.returncode == 0, r.stderr
    assert "preview of" in r.stdout and "clamped" in r.stdout, r.stdout


def test_apply_dry_run(run: Run, tmp_path: Path) -> None:
    r = run(
        *(
            "apply",
            "--dry-run",
            "--json",
            "--config",
            str(REPO / "configs" / "configuration-qemu.toml"),
        ),
        *("--pod", str(PODS / "two-containers.yaml"), *HOST),
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "Resized"


def test_print_schema_and_where_the_schemas_are(run: Run, program: Path) -> None:
    for name in ("request", "response"):
        r = run("shim", "--print-schema", name)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == json.loads((SCHEMAS / f"shim-{name}.v1.json").read_text())
    r = run("shim", "--help")
    line = next(x for x in r.stdout.splitlines() if "installed in" in x)
    directory = Path(line.split("installed in ", 1)[1].rstrip("/"))
    assert directory.resolve().is_relative_to(program.parent.parent.resolve()), line
    assert {p.name for p in directory.iterdir()} == {
        "shim-request.v1.json",
        "shim-response.v1.json",
    }


def shim_request(cfg: Path, **fields: Any) -> str:
    return json.dumps(shim_request_doc(cfg, **fields))


def response(run: Run, raw: str) -> tuple[int, dict[str, Any], str]:
    schema = json.loads(run("shim", "--print-schema", "response").stdout)
    r = run("shim", input=raw)
    doc: dict[str, Any] = json.loads(r.stdout)
    jsonschema.validate(doc, schema)
    assert "Traceback" not in r.stderr, r.stderr
    return r.returncode, doc, r.stderr


def test_shim_plan_only(run: Run, tmp_path: Path) -> None:
    code, doc, err = response(run, shim_request(config(tmp_path)))
    assert code == 0 and doc["plan"]["memory"]["target_mib"] == 3072, err


def test_the_qmp_backend_is_there(run: Run, tmp_path: Path) -> None:
    """Without extras, QMP (the default backend) works: a missing socket is exit 6."""
    cfg, sock = config(tmp_path), str(tmp_path / "qmp.sock")
    r = run("apply", "--config", str(cfg), "--limit", "1Gi", "--qmp", sock)
    assert r.returncode == 6 and "no such file" in r.stderr, r.stderr
    r = run("status", "--qmp", sock)
    assert r.returncode == 6, r.stderr
    code, doc, _ = response(
        run, shim_request(cfg, backend={"type": "qmp", "socket": sock}, apply=True)
    )
    assert code == 6 and doc["error"]["kind"] == "backend-unavailable", doc


def test_libvirt_without_the_extra(run: Run, tmp_path: Path) -> None:
    cfg = config(tmp_path)
    libvirt = ("--libvirt", "test:///default", "--domain", "x")
    for args in (("apply", "--config", str(cfg), "--limit", "1Gi", *libvirt), ("status", *libvirt)):
        r = run(*args, "--state-dir", str(tmp_path / "state"))
        assert r.returncode == 9, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "pip install 'kata-mem[libvirt]'" in r.stderr, r.stderr
    backend = {"type": "libvirt", "uri": "test:///default", "domain": "x"}
    code, doc, _ = response(run, shim_request(cfg, backend=backend, apply=True))
    assert code == 9 and doc["error"]["kind"] == "missing-dependency", doc
    assert "pip install 'kata-mem[libvirt]'" in doc["error"]["message"]


def test_completion(run: Run) -> None:
    r = run(_KATA_MEM_COMPLETE="bash_source")
    assert r.returncode == 0 and "complete " in r.stdout
    r = run(
        _KATA_MEM_COMPLETE="bash_complete",
        COMP_WORDS="kata-mem preview --config ",
        COMP_CWORD="3",
    )
    assert r.stdout.splitlines() == ["file,"]


def test_the_shim_client_is_installed_and_answers_without_a_service(
    program: Path, tmp_path: Path
) -> None:
    """``kata-mem-shim`` beside ``kata-mem``: with no service on its socket it answers in
    process, the same bytes as ``kata-mem shim``."""
    client = program.with_name("kata-mem-shim")
    raw = shim_request(config(tmp_path))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["KATA_MEM_SOCKET"] = str(tmp_path / "no-service.sock")
    got = [
        subprocess.run(
            [str(exe), *args], input=raw, env=env, capture_output=True, text=True,
            cwd=tmp_path, timeout=120, check=False,
        )
        for exe, args in ((client, []), (program, ["shim"]))
    ]  # fmt: skip
    assert got[0].returncode == got[1].returncode == 0, got[0].stderr
    assert got[0].stdout == got[1].stdout
