"""The RuntimeClass overhead against its case table (tests/fixtures/runtimeclass-cases):
each case a Kata configuration read by the real loader, the command's options, and the
podFixed it must come to (the arithmetic in each case's ``why``) or the error that
refuses it; what a case may hold: tests/fixtures/schemas/runtimeclass.schema.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kata_mem.core.errors import KataMemError
from kata_mem.core.quantity import quantity_bytes
from kata_mem.core.runtimeclass import runtime_class_overhead
from kata_mem.core.units import MiB
from kata_mem.edges.config import load_config
from tests.support.cases import case_params
from tests.support.configs import write_config


@pytest.mark.parametrize("case", case_params("runtimeclass"))
def test_runtimeclass_case(case: dict[str, Any], tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "configuration.toml",
        case.get("hypervisor"),
        case.get("runtime"),
        case.get("kata_mem"),
    )
    expect = case["expect"]
    given = case.get("max_pod_memory")

    def compute() -> Any:
        cfg = load_config(path)
        most = None if given is None else quantity_bytes(given, "--max-pod-memory")
        return runtime_class_overhead(cfg, case.get("arch", "amd64"), most, case.get("sizing"))

    if "exit_code" in expect:
        with pytest.raises(KataMemError) as refused:
            compute()
        assert refused.value.exit_code == expect["exit_code"], refused.value.message
        assert expect["message"] in refused.value.message
        return
    found = compute()
    assert (found.memory, found.binding.limits) == (
        expect["pod_fixed_mib"] * MiB,
        expect["binding_limits_bytes"],
    ), found.binding
    assert found.cpu_millis == expect["cpu_millis"]
    if "binding_vm_mib" in expect:
        assert found.binding.vm == expect["binding_vm_mib"] * MiB
    if "max_pod_memory_bytes" in expect:
        assert (found.max_pod_memory, found.max_pod_memory_from) == (
            expect["max_pod_memory_bytes"],
            "default_maxmemory",
        )
