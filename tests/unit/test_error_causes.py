"""Errors keep their causes: an error translated from a library's exception chains it
(``raise ... from exc``), so a debugger or ``KATA_MEM_DEBUG=1`` shows what really failed.
The user still sees one line: the CLI and the shim print only the message."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kata_mem.core.errors import ConfigError, InputError, KataMemError, QuantityError
from kata_mem.core.manifest import kubernetes_quantity, load_documents
from kata_mem.core.quantity import quantity_bytes
from kata_mem.edges.config import load_config
from kata_mem.edges.files import MANIFEST_CAP, read_capped, read_capped_text
from kata_mem.edges.sources import cli_containers, read_oci
from tests.support.paths import REPO

#: Files exempted from the ``from None`` rule while they are rewritten (none now).
PENDING: set[str] = set()


def _raises(fn: Callable[[], object], error: type[KataMemError]) -> BaseException:
    with pytest.raises(error) as info:
        fn()
    cause = info.value.__cause__
    assert cause is not None, f"{info.value!r} lost its cause"
    return cause


def test_config_errors_keep_the_toml_error(tmp_path: Path) -> None:
    bad = tmp_path / "configuration.toml"
    bad.write_text("[hypervisor.qemu\n")
    assert "TOMLDecodeError" in type(_raises(lambda: load_config(bad), ConfigError)).__name__
    bad.write_bytes(b"[hypervisor.qemu]\nx = '\xff'\n")
    assert isinstance(_raises(lambda: load_config(bad), ConfigError), UnicodeDecodeError)


def test_file_errors_keep_the_os_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    cause = _raises(
        lambda: read_capped(missing, cap=MANIFEST_CAP, what="OCI spec", error=InputError),
        InputError,
    )
    assert isinstance(cause, FileNotFoundError)
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes(b"kind: Pod \xe9\n")
    cause = _raises(
        lambda: read_capped_text(latin, cap=MANIFEST_CAP, what="Pod manifest", error=InputError),
        InputError,
    )
    assert isinstance(cause, UnicodeDecodeError)


def test_manifest_errors_keep_the_decoder_error() -> None:
    assert isinstance(_raises(lambda: load_documents("{", "pod.json"), InputError), ValueError)
    assert isinstance(
        _raises(lambda: load_documents("a: [1", "pod.yaml"), InputError), yaml.YAMLError
    )
    deep = "[" * 100_000 + "]" * 100_000
    assert isinstance(_raises(lambda: load_documents(deep, "pod.json"), InputError), RecursionError)
    assert isinstance(
        _raises(lambda: kubernetes_quantity("1Qi", "memory"), QuantityError), QuantityError
    )
    assert isinstance(
        _raises(lambda: kubernetes_quantity(float("inf"), "memory"), QuantityError), ValueError
    )


def test_source_errors_keep_the_parser_error(tmp_path: Path) -> None:
    spec = tmp_path / "config.json"
    spec.write_text("{")
    assert isinstance(_raises(lambda: read_oci(spec, "amd64"), InputError), json.JSONDecodeError)
    assert isinstance(_raises(lambda: quantity_bytes("12x"), QuantityError), QuantityError)
    assert isinstance(_raises(lambda: cli_containers((), ("1.2.3",)), QuantityError), QuantityError)


def test_no_error_drops_its_cause() -> None:
    dropped = sorted(
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in (REPO / "kata_mem").rglob("*.py")
        if str(path.relative_to(REPO)) not in PENDING
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Raise)
        and isinstance(node.cause, ast.Constant)
        and node.cause.value is None
    )
    assert dropped == [], "raise ... from None drops the cause; use from exc"
