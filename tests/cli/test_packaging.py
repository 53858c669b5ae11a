"""Packaging and bad arguments, against the checkout (tests/cli/test_installed.py runs
the installed wheel): the dependencies, a missing library (exit 9, one line, a JSON
error document in the shim), the schemas as package data and `shim --print-schema`,
shell completion, and values kata-mem refuses: non-UTF-8 arguments, a shim request
with a key given twice or a lone surrogate, `--sandbox ''`."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path, PurePath
from typing import Any, Optional

import jsonschema
import pytest

from kata_mem.interfaces.pipes import CLOSED_STDOUT, STDOUT_FAILED
from kata_mem.interfaces.shim import run_shim
from tests.support.cli import kata_mem_process
from tests.support.configs import write_config
from tests.support.paths import REPO, doc
from tests.support.shim import shim_request_doc

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the test extra brings tomli
    import tomli as tomllib

SCHEMAS = REPO / "kata_mem" / "schemas"
RESPONSE_SCHEMA = json.loads((SCHEMAS / "shim-response.v1.json").read_text())
BUNDLED = REPO / "configs" / "configuration-qemu.toml"
BAD = "\udcff"  # how Python carries the byte 0xff of a non-UTF-8 argument


def config(tmp_path: Path) -> Path:
    """A configuration whose state directory is under ``tmp_path``."""
    return write_config(
        tmp_path / "configuration.toml",
        {"default_memory": 2048},
        kata_mem={"state_dir": str(tmp_path / "state")},
    )


def without(
    module: str, *args: str, input: Optional[str] = None
) -> subprocess.CompletedProcess[str]:
    """kata-mem as a real process in which ``import MODULE`` fails as if it were not
    installed (the real thing, a clean virtualenv, is tests/cli/test_installed.py)."""
    code = f"import sys; sys.modules[{module!r}] = None\nfrom kata_mem.interfaces.main import run\nrun()\n"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        input=input,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


def one_line_error(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kata-mem"), err
    assert "Traceback" not in err and all(n in err for n in needles), err


def shim_error(r: subprocess.CompletedProcess[str], code: int, kind: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(r.stdout)
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    assert r.returncode == code and doc["error"]["exit_code"] == code, r.stdout + r.stderr
    assert doc["error"]["kind"] == kind and "Traceback" not in r.stderr, r.stderr
    error: dict[str, Any] = doc["error"]
    return error


# -- dependencies ---------------------------------------------------------------------------


def test_qemu_qmp_is_a_dependency_and_libvirt_an_extra() -> None:
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split(";")[0].strip() for d in meta["dependencies"]]
    assert "qemu.qmp" in names and "libvirt-python" not in names
    assert any(d.startswith("libvirt-python") for d in meta["optional-dependencies"]["libvirt"])


@pytest.mark.parametrize("command", ["apply", "status"])
def test_missing_libvirt_is_exit_9_in_one_line(tmp_path: Path, command: str) -> None:
    args = [command, "--libvirt", "test:///default", "--domain", "x"]
    args += ["--state-dir", str(tmp_path / "state")]
    if command == "apply":
        args += ["--config", str(config(tmp_path)), "--limit", "1Gi"]
    r = without("libvirt", *args)
    assert r.returncode == 9, r.stderr
    one_line_error(r.stderr, "libvirt-python", "pip install 'kata-mem[libvirt]'")


def test_missing_libvirt_with_json_prints_the_error_document(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    r = without(
        "libvirt",
        *("apply", "--config", str(cfg), "--limit", "1Gi", "--json"),
        *("--libvirt", "test:///default", "--domain", "x", "--state-dir", str(tmp_path / "state")),
    )
    assert r.returncode == 9
    doc = json.loads(r.stdout)
    assert doc["error"]["kind"] == "missing-dependency" and doc["error"]["exit_code"] == 9


def test_missing_libvirt_in_the_shim_is_a_json_error(tmp_path: Path) -> None:
    backend = {"type": "libvirt", "uri": "test:///default", "domain": "x"}
    doc = shim_request_doc(config(tmp_path), backend=backend, apply=True)
    r = without("libvirt", "shim", input=json.dumps(doc))
    error = shim_error(r, 9, "missing-dependency")
    assert "pip install 'kata-mem[libvirt]'" in error["message"]
    assert "--libvirt" not in error["message"]  # the shim has no such flag


def test_missing_qemu_qmp_is_exit_9_too(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    sock = str(tmp_path / "qmp.sock")
    r = without(
        "qemu",
        *("apply", "--config", str(cfg), "--limit", "1Gi", "--qmp", sock),
        *("--state-dir", str(tmp_path / "state")),
    )
    assert r.returncode == 9, r.stderr
    one_line_error(r.stderr, "qemu.qmp", "pip install")
    r = without(
        "qemu",
        "shim",
        input=json.dumps(
            shim_request_doc(cfg, backend={"type": "qmp", "socket": sock}, apply=True)
        ),
    )
    assert "qemu.qmp" in shim_error(r, 9, "missing-dependency")["message"]


def test_every_exit_code_is_in_the_readme() -> None:
    from kata_mem.core import errors

    table = doc("reference/exit-codes.md").split("\n## ", 1)[0]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)}
    codes = {
        cls.exit_code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.KataMemError)
    }
    # 0: done; 2: click's usage error; 8: an outcome (the guest timed out), not an error;
    # 74 and 141: stdout could not take the result, or was closed before it was written.
    assert errors.MissingDependency.exit_code == 9
    assert codes | {0, 2, errors.GUEST_TIMEOUT_EXIT, STDOUT_FAILED, CLOSED_STDOUT} == documented
    assert "pip install 'kata-mem[libvirt]'" in table


def test_a_bug_in_the_shim_is_still_a_json_document(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> dict[str, Any]:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("kata_mem.orchestration.handle.handle", broken)
    request = b'{"schema": "kata-mem/shim-request/v1", "sandbox_id": "sb", "event": "update"}'
    out = io.StringIO()
    assert run_shim(io.BytesIO(request), out, {}) == 1
    doc = json.loads(out.getvalue())
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    assert (
        doc["error"]["kind"] == "internal" and "ZeroDivisionError: a bug" in doc["error"]["message"]
    )
    with pytest.raises(ZeroDivisionError):  # KATA_MEM_DEBUG=1: the traceback, for a developer
        run_shim(io.BytesIO(request), io.StringIO(), {"KATA_MEM_DEBUG": "1"})


# -- schemas as package data ----------------------------------------------------------------


def test_schemas_live_in_the_package_only() -> None:
    assert sorted(p.name for p in SCHEMAS.iterdir()) == [
        "shim-request.v1.json",
        "shim-response.v1.json",
    ]
    assert not (REPO / "schemas").exists()  # no second copy to drift
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "schemas/*.json" in package_data["package-data"]["kata_mem"]


def test_every_data_file_of_the_package_is_package_data() -> None:
    """A file under kata_mem that is not Python (the schemas, Go's Unicode tables) reaches
    the wheel only through a package-data glob: one left out works in a checkout and fails
    installed."""
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["kata_mem"]
    package = REPO / "kata_mem"
    data = [
        p.relative_to(package)
        for p in package.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert PurePath("core/data/go-unicode.json") in data
    assert [p for p in data if not any(p.match(g) for g in globs)] == []


@pytest.mark.parametrize("name", ["request", "response"])
@pytest.mark.parametrize("form", ["separate", "equals"])
def test_print_schema(name: str, form: str) -> None:
    args = ["--print-schema", name] if form == "separate" else [f"--print-schema={name}"]
    r = kata_mem_process("shim", *args, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads((SCHEMAS / f"shim-{name}.v1.json").read_text())


@pytest.mark.parametrize(
    "args", [["--print-schema"], ["--print-schema", "plan"], ["--print-schema", "request", "x"]]
)
def test_print_schema_needs_one_known_name(args: list[str]) -> None:
    r = kata_mem_process("shim", *args, timeout=60)
    assert r.returncode == 2 and r.stdout == ""
    assert "--print-schema expects one name, request or response" in r.stderr


def test_shim_help_says_where_the_schemas_are() -> None:
    r = kata_mem_process("shim", "--help", timeout=60)
    assert r.returncode == 0
    assert f"installed in {SCHEMAS}/" in r.stdout and "--print-schema request|response" in r.stdout


# -- shell completion -----------------------------------------------------------------------


def complete(*words: str) -> list[str]:
    """What click's bash completion offers for the last of ``words`` (empty: a new word)."""
    r = kata_mem_process(
        env={
            "_KATA_MEM_COMPLETE": "bash_complete",
            "COMP_WORDS": " ".join(("kata-mem", *words)),
            "COMP_CWORD": str(len(words)),
        },
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


@pytest.mark.parametrize(
    ("words", "kind"),
    [
        (("preview", "--config"), "file"),
        (("preview", "--pod"), "file"),
        (("preview", "--oci"), "file"),
        (("apply", "--qmp"), "file"),
        (("apply", "--state-dir"), "dir"),
        (("reconcile", "--state-dir"), "dir"),
        (("status", "--config"), "file"),
        (("config", "check"), "file"),
    ],
)
def test_completion_offers_file_and_directory_names(words: tuple[str, ...], kind: str) -> None:
    assert complete(*words, "") == [f"{kind},"]


def test_completion_scripts_for_each_shell() -> None:
    for shell in ("bash", "zsh", "fish"):
        r = kata_mem_process(env={"_KATA_MEM_COMPLETE": f"{shell}_source"}, timeout=60)
        assert r.returncode == 0 and "_KATA_MEM_COMPLETE" in r.stdout, shell


def test_path_options_keep_kata_mems_own_checks(tmp_path: Path) -> None:
    """The completion types do no checking of their own: kata-mem's messages and codes stay."""
    r = kata_mem_process("preview", "--config", str(tmp_path / "none.toml"))
    assert r.returncode == 3 and "no such configuration file" in r.stderr
    r = kata_mem_process("preview", "--config", str(BUNDLED), "--pod", str(tmp_path / "none.yaml"))
    assert r.returncode == 4 and "no such Pod manifest file" in r.stderr
    r = kata_mem_process("reconcile", "--state-dir", str(BUNDLED))
    assert r.returncode != 2 and "Usage:" not in r.stderr and "is a file" not in r.stderr


# -- values kata-mem refuses ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "args"),
    [
        ("--qmp", ["apply", "--limit", "1Gi", "--qmp", f"/tmp/{BAD}.sock"]),
        ("--qmp", ["status", "--qmp", f"/tmp/{BAD}.sock"]),
        ("--libvirt", ["apply", "--limit", "1Gi", "--libvirt", f"test:///{BAD}", "--domain", "x"]),
        ("--domain", ["apply", "--limit", "1Gi", "--libvirt", "test:///default", "--domain", BAD]),
        ("--sandbox", ["apply", "--limit", "1Gi", "--qmp", "/tmp/q.sock", "--sandbox", f"sb{BAD}"]),
        ("--state-dir", ["apply", "--limit", "1Gi", "--dry-run", "--state-dir", f"/tmp/{BAD}"]),
        ("--state-dir", ["reconcile", "--state-dir", f"/tmp/{BAD}"]),
        ("--config", ["preview", "--config", f"/tmp/{BAD}.toml"]),
        ("FILE", ["config", "check", f"/tmp/{BAD}.toml"]),
        # Only read, but named in what kata-mem prints (the title, messages, --json).
        ("--pod", ["preview", "--pod", f"/tmp/{BAD}.yaml"]),
        ("--oci", ["preview", "--oci", f"/tmp/{BAD}.json"]),
    ],
)
def test_non_utf8_arguments_are_refused(option: str, args: list[str]) -> None:
    if "--config" not in args and args[0] in ("apply", "preview"):
        args = [*args, "--config", str(BUNDLED)]
    r = kata_mem_process(*args)  # the argument reaches the process as the byte 0xff
    assert r.returncode == 4, r.stderr
    one_line_error(r.stderr, f"error: {option} b'", "\\xff", "not valid UTF-8")


@pytest.mark.parametrize("command", ["apply", "status"])
def test_an_empty_sandbox_id_is_refused(tmp_path: Path, command: str) -> None:
    args = [command, "--qmp", str(tmp_path / "qmp.sock"), "--sandbox", ""]
    if command == "apply":
        args += ["--config", str(config(tmp_path)), "--limit", "1Gi"]
    r = kata_mem_process(*args, "--state-dir", str(tmp_path / "state"))
    # A usage error, as every empty option value is.
    assert r.returncode == 2, r.stderr
    assert (
        "Invalid value for '--sandbox': an empty value" in r.stderr and "Traceback" not in r.stderr
    )


def shim(raw: str) -> tuple[int, dict[str, Any], str]:
    r = kata_mem_process("shim", input=raw, timeout=60)
    doc: dict[str, Any] = json.loads(r.stdout)
    jsonschema.validate(doc, RESPONSE_SCHEMA)
    return r.returncode, doc, r.stderr


def test_a_plain_request_is_still_accepted(tmp_path: Path) -> None:
    code, doc, err = shim(json.dumps(shim_request_doc(config(tmp_path))))
    assert code == 0 and doc["plan"]["memory"]["target_mib"] == 3072, err


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ('"event": "update", "event": "delete"', 'request event: the key "event"'),
        (
            '"containers": [{"id": "c1", "id": "c2"}]',
            'request containers[0].id: the key "id"',
        ),
        (
            '"containers": [{"id": "c1"}], "backend": {"type": "qmp", "socket": "/a", "socket": "/b"}',
            'request backend.socket: the key "socket"',
        ),
        (
            '"annotations": {"io.kubernetes.cri.sandbox-memory": "1", '
            '"io.kubernetes.cri.sandbox-memory": "2"}',
            'request annotations["io.kubernetes.cri.sandbox-memory"]: the key',
        ),
        ('"host": {"cpus": 4, "cpus": 8}', 'request host.cpus: the key "cpus"'),
    ],
)
def test_a_key_given_twice_is_refused(tmp_path: Path, fields: str, path: str) -> None:
    base = json.dumps(
        {
            "schema": "kata-mem/shim-request/v1",
            "sandbox_id": "sb-1",
            "config": str(config(tmp_path)),
        }
    )
    if '"event"' not in fields:
        fields += ', "event": "update"'
    code, doc, err = shim(base[:-1] + ", " + fields + "}")
    assert code == 4 and doc["error"]["kind"] == "input", err
    assert doc["error"]["message"].startswith(path), doc
    assert "given more than once in one object; expected each key once" in doc["error"]["message"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("backend.socket", "/tmp/\ud800.sock"),
        ("config", "/tmp/\udcff.toml"),
        ("containers[0].id", "c\udcff"),
    ],
)
def test_a_lone_surrogate_is_refused(tmp_path: Path, field: str, value: str) -> None:
    doc = shim_request_doc(
        config(tmp_path), apply=True, backend={"type": "qmp", "socket": "/tmp/q.sock"}
    )
    if field == "config":
        doc["config"] = value
    elif field == "backend.socket":
        doc["backend"]["socket"] = value
    else:
        doc["containers"][0]["id"] = value
    code, out, _ = shim(json.dumps(doc))  # the surrogate travels as the escape \udcff
    assert code == 4, out
    assert out["error"]["message"].startswith(f"request {field}: "), out
    assert "is not valid Unicode (a lone surrogate); expected UTF-8 text" in out["error"]["message"]
