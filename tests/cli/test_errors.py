"""Every error the CLI can meet: one line naming what and where, the documented
exit code, no traceback."""

from __future__ import annotations

import importlib
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from kata_mem.core import errors
from kata_mem.core.results import outcome_exit_code
from tests.support.cli import CliResult, kata_mem_process
from tests.support.configs import HOST_ARGS, write_config
from tests.support.paths import KATA_CONFIGS, PODS, REPO

UPSTREAM_QEMU = str(KATA_CONFIGS / "configuration-qemu.toml")
Run = Callable[..., CliResult]

ERROR_CLASSES = [
    cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, errors.KataMemError)
]


def test_exit_codes_are_the_documented_ones() -> None:
    table = {
        errors.KataMemError: 1,
        errors.ConfigError: 3,
        errors.InputError: 4,
        errors.QuantityError: 4,
        errors.BackendUnavailable: 6,
        errors.BackendError: 7,
        errors.BackendUnsupported: 7,
        errors.MissingDependency: 9,
        errors.Interrupted: 130,
        errors.Terminated: 143,
    }
    assert {cls: cls.exit_code for cls in ERROR_CLASSES} == table
    # 8 has no class: a guest timeout is an outcome (test_packaging checks the documentation's table).
    assert [outcome_exit_code(r) for r in ("PlugTimeout", "UnplugTimeout")] == [8, 8]


class _Exited(Exception):
    """What ``os._exit`` raises in these tests."""


def _libvirt_failure(code_name: str) -> errors.KataMemError:
    libvirt = pytest.importorskip("libvirt")
    from kata_mem.backends.libvirt import _translate

    exc = libvirt.libvirtError("no")
    exc.err = (getattr(libvirt, code_name), 0, "no", 2, 0, None, None, None, None, 0, 0)
    return _translate(exc, "setMemoryFlags", "qemu:///system vm0")


def _signalled(monkeypatch: pytest.MonkeyPatch, signum: int) -> tuple[str, int]:
    """The kind and exit code that a signal's handler reports (it ends the process)."""
    from kata_mem.interfaces import pipes, stops

    said: dict[str, object] = {}

    def line(*args: object, **kwargs: object) -> str:
        said.update(kwargs)
        return "line"

    def exit_now(status: int) -> None:
        raise _Exited(status)

    monkeypatch.setattr("kata_mem.edges.logs.line", line)
    monkeypatch.setattr(pipes, "write_now", lambda fd, text: None)
    monkeypatch.setattr("os._exit", exit_now)
    with pytest.raises(_Exited) as ended:
        stops.Stops().stop(signum, None)
    return str(said["kind"]), ended.value.args[0]


def _bug(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> errors.KataMemError:
    from kata_mem.core.request import SandboxRequest
    from kata_mem.interfaces.protocol import answer

    def broken(*args: object) -> None:
        raise TimeoutError

    monkeypatch.setattr("kata_mem.orchestration.handle.handle", broken)
    error = answer(SandboxRequest("sb"), {}).error
    assert error is not None
    return error


def _raised(fn: Callable[[], object]) -> errors.KataMemError:
    with pytest.raises(errors.KataMemError) as info:
        fn()
    return info.value


def _missing_library(monkeypatch: pytest.MonkeyPatch) -> errors.KataMemError:
    monkeypatch.setitem(sys.modules, "libvirt", None)
    monkeypatch.delitem(sys.modules, "kata_mem.backends.libvirt", raising=False)
    return _raised(lambda: importlib.import_module("kata_mem.backends.libvirt"))


def _failure(cls: type[errors.KataMemError], mp: pytest.MonkeyPatch, tmp: Path) -> tuple[str, int]:
    """What a failure a user can meet reports, for each error class (its kind, its code)."""
    from kata_mem.core.endpoint import Endpoint
    from kata_mem.core.model import check_sandbox_id
    from kata_mem.core.quantity import parse_quantity
    from kata_mem.edges.config import load_config
    from kata_mem.orchestration.connect import open_backend

    if cls is errors.Interrupted:
        return _signalled(mp, signal.SIGINT)
    if cls is errors.Terminated:
        return _signalled(mp, signal.SIGTERM)
    makers: dict[type[errors.KataMemError], Callable[[], errors.KataMemError]] = {
        errors.KataMemError: lambda: _bug(mp, tmp),
        errors.ConfigError: lambda: _raised(lambda: load_config(tmp / "nope.toml")),
        errors.InputError: lambda: _raised(lambda: check_sandbox_id("../x")),
        errors.QuantityError: lambda: _raised(lambda: parse_quantity("1.1.1")),
        errors.BackendUnavailable: lambda: _raised(
            lambda: open_backend(Endpoint.from_json({"type": "qmp", "socket": str(tmp / "no")}), {})
        ),
        errors.BackendError: lambda: _libvirt_failure("VIR_ERR_OPERATION_FAILED"),
        errors.BackendUnsupported: lambda: _libvirt_failure("VIR_ERR_NO_SUPPORT"),
        errors.MissingDependency: lambda: _missing_library(mp),
    }
    made = makers[cls]()
    assert type(made) is cls, made
    return made.kind, made.exit_code


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda cls: cls.__name__)
def test_every_error_class_is_what_a_failure_reports(
    cls: type[errors.KataMemError], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A class no failure reports promises an exit code that no failure gives.
    assert _failure(cls, monkeypatch, tmp_path) == (cls.kind, cls.exit_code)


def _one_line_error(r: CliResult, code: int, *needles: str) -> None:
    assert r.code == code, (r.code, r.err)
    assert "Traceback" not in r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith("kata-mem: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_missing_config_file(run_cli: Run, tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    _one_line_error(
        run_cli("preview", "--config", str(missing), *HOST_ARGS),
        3,
        str(missing),
        "no such configuration file",
    )


def test_no_config_anywhere(run_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("kata_mem.edges.config.DEFAULT_PATHS", ("/nonexistent/a.toml",))
    _one_line_error(run_cli("config", "check"), 3, "no Kata configuration found", "KATA_CONF_FILE")


def test_kata_conf_file_naming_a_missing_file(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KATA_CONF_FILE", str(tmp_path / "nope.toml"))
    _one_line_error(
        run_cli("config", "check"),
        3,
        "nope.toml: no such configuration file (named by KATA_CONF_FILE)",
    )


def test_bad_toml(run_cli: Run, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[hypervisor.qemu]\ndefault_memory = \n")
    _one_line_error(run_cli("config", "check", str(bad)), 3, str(bad), "invalid TOML")


def test_wrong_type(run_cli: Run, tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", {"default_maxmemory": "8G"})
    _one_line_error(
        run_cli("preview", "--config", str(path), *HOST_ARGS),
        3,
        "[hypervisor.qemu] default_maxmemory",
        "expected a non-negative integer (MiB",
        "'8G'",
    )


def test_negative_size_in_config(run_cli: Run, tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", {"default_memory": -2048})
    _one_line_error(run_cli("config", "check", str(path)), 3, "default_memory", "got -2048")


def test_unknown_unit(run_cli: Run) -> None:
    _one_line_error(
        run_cli("preview", "--config", UPSTREAM_QEMU, "--limit", "5K", *HOST_ARGS),
        4,
        "--limit '5K'",
        "invalid quantity",
        "Ki Mi Gi",
    )


def test_negative_limit(run_cli: Run) -> None:
    _one_line_error(
        run_cli("preview", "--config", UPSTREAM_QEMU, "--limit", "-1Gi", *HOST_ARGS), 4, "negative"
    )


def test_bad_host_memory(run_cli: Run) -> None:
    _one_line_error(
        run_cli("preview", "--config", UPSTREAM_QEMU, "--host-memory", "lots"),
        4,
        "--host-memory",
        "'lots'",
    )


def test_manifest_without_containers(run_cli: Run, tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {}\n")
    _one_line_error(
        run_cli("preview", "--config", UPSTREAM_QEMU, "--pod", str(pod), *HOST_ARGS),
        4,
        str(pod),
        "spec.containers: expected a non-empty list",
    )


def test_missing_pod_file(run_cli: Run, tmp_path: Path) -> None:
    _one_line_error(
        run_cli(
            "preview", "--config", UPSTREAM_QEMU, "--pod", str(tmp_path / "x.yaml"), *HOST_ARGS
        ),
        4,
        "no such Pod manifest file",
    )


def test_current_below_boot_memory(run_cli: Run) -> None:
    _one_line_error(
        run_cli("preview", "--config", UPSTREAM_QEMU, "--current", "1Gi", *HOST_ARGS),
        4,
        "--current",
        "below the boot memory",
    )


def test_usage_error_is_click_exit_2(run_cli: Run) -> None:
    r = run_cli("preview", "--no-such-flag")
    assert r.code == 2 and "No such option" in r.err


def test_json_error_document(run_cli: Run, tmp_path: Path) -> None:
    r = run_cli("preview", "--config", str(tmp_path / "x.toml"), "--json", *HOST_ARGS)
    assert r.code == 3
    doc = json.loads(r.out)
    assert doc["schema"] == "kata-mem/error/v1"
    assert doc["error"]["kind"] == "config" and doc["error"]["exit_code"] == 3


def test_real_process_prints_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe not toml")
    r = kata_mem_process(
        "preview", "--config", str(bad), "--pod", str(PODS / "memory-boom.yaml"), timeout=60
    )
    assert r.returncode == 3
    assert r.stderr.startswith(f"kata-mem: error: {bad}: invalid TOML")
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_stdin_that_is_a_directory_is_cpythons_refusal_and_documented(tmp_path: Path) -> None:
    """CPython refuses a directory on descriptor 0 before any of
    kata-mem's code runs (Python/pylifecycle.c ``init_sys_streams``), so kata-mem cannot
    answer it with one line and exit 4: the exit-code reference says so, and what to do."""
    import os
    import subprocess
    import sys

    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "kata_mem", "shim"],
            stdin=fd,
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
            check=False,
        )
    finally:
        os.close(fd)
    assert r.returncode == 1 and r.stdout == ""
    assert "init_sys_streams: <stdin> is a directory, cannot continue" in r.stderr
    doc = " ".join((REPO / "docs" / "reference" / "exit-codes.md").read_text().split())
    assert "init_sys_streams: <stdin> is a directory, cannot continue" in doc


def test_a_file_named_json_asks_for_no_json(run_cli: Run, tmp_path: Path) -> None:
    # click gives --pod the value "--json": a file name, so the error is text. The
    # workload is read before the configuration, by preview as by apply (one request).
    r = run_cli("preview", "--config", str(tmp_path / "none.toml"), "--pod", "--json")
    assert r.code == 4
    assert r.out == "" and r.err == "kata-mem: error: --json: no such Pod manifest file\n"


def test_json_asked_for_is_the_error_document_even_for_an_option_before_it(
    run_cli: Run,
) -> None:
    # --json is read before every other option's value is checked.
    r = run_cli("preview", "--config", UPSTREAM_QEMU, "--host-cpus", "2", "--limit", "1Q", "--json")
    assert r.code == 4
    assert json.loads(r.out)["error"]["message"].startswith("--limit '1Q': invalid quantity")
    r = run_cli("config", "check", "/nonexistent.toml", "--json")
    assert (r.code, json.loads(r.out)["error"]["exit_code"]) == (3, 3)
