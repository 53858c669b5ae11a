"""The planner against the JSON case table (tests/fixtures/plan-cases), one case per rule;
what a case may hold: tests/fixtures/schemas/plan.schema.json."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from kata_mem.core.cpuset import cpuset_size
from kata_mem.core.errors import ConfigError
from kata_mem.core.model import (
    CgroupLevel,
    Container,
    Guards,
    HostCgroup,
    HostFacts,
    NodeView,
    Plan,
    PodResources,
    SandboxSizing,
    SizingConfig,
    Unseen,
    VmState,
    Workload,
)
from kata_mem.core.plan import plan
from kata_mem.core.plan.geometry import assumed_vm
from kata_mem.core.quantity import parse_quantity, quantity_bytes
from kata_mem.core.units import MiB
from kata_mem.interfaces.render import plan_json, plan_text, warnings_json
from tests.support.cases import build_vm, case_params, float32


def build_host(spec: dict[str, Any]) -> HostFacts:
    limit = spec.get("cgroup_limit_mib")
    return HostFacts(
        memory=spec["memory_mib"] * MiB,
        cpus=spec.get("cpus", 4),
        arch=spec.get("arch", "amd64"),
        hugepage_size=spec.get("hugepage_size_kib", 2048) * 1024,
        hugepages_total=spec.get("hugepages_total", 0),
        cgroup_memory_limit=None if limit is None else limit * MiB,
    )


def build_workload(case: dict[str, Any]) -> Workload:
    containers = tuple(
        Container(
            name=f"c{i}",
            memory_limit=quantity_bytes(c["limit"]) if "limit" in c else 0,
            cpu=parse_quantity(c["cpu"]) if "cpu" in c else Fraction(0),
            hugepages_limit=quantity_bytes(c["hugepages"]) if "hugepages" in c else 0,
            role=c.get("role", "app"),
            state=c.get("state", "running"),
            cpuset_cpus=cpuset_size(c.get("cpuset", ""), f"case container {i}"),
        )
        for i, c in enumerate(case.get("containers", []))
    )
    sizing = case.get("sizing")
    overhead = case.get("overhead_mib")
    given = case.get("pod_resources")
    pod = None
    if given is not None:
        pod = PodResources(
            quantity_bytes(given["memory"]) if "memory" in given else None,
            parse_quantity(given["cpu"]) if "cpu" in given else None,
            quantity_bytes(given["hugepages"]) if "hugepages" in given else None,
            "pod.yaml: spec.resources.limits",
        )
    return Workload(
        containers,
        None
        if sizing is None
        else SandboxSizing(quantity_bytes(sizing["memory"]), parse_quantity(sizing["cpu"])),
        None if overhead is None else overhead * MiB,
        "" if overhead is None else "pod.yaml: spec.overhead.memory",
        pod,
    )


def _mib(spec: dict[str, Any], key: str) -> int | None:
    value = spec.get(key)
    return None if value is None else value * MiB


def build_guards(case: dict[str, Any]) -> Guards | None:
    """``cgroup``: the VMM's cgroup, its limited levels innermost first; ``node``: the
    node's total as the admission sees it. Neither: no guards (``plan(..., None)``)."""
    if not {"cgroup", "node", "unseen", "pod_limit_mib"} & set(case):
        return None
    cgroup = None
    if "cgroup" in case:
        cg = case["cgroup"]
        levels = tuple(
            CgroupLevel(lvl["path"], lvl["limit_mib"] * MiB, _mib(lvl, "usage_mib"))
            for lvl in cg["levels"]
        )
        cgroup = HostCgroup(
            cg.get("path", "/sys/fs/cgroup/kubepods.slice/pod1"),
            cg.get("version", 2),
            _mib(cg, "usage_mib"),
            levels,
            origin="case",
        )
    node = None
    if "node" in case:
        n = case["node"]
        node = NodeView(
            host=n["host_mib"] * MiB,
            reserved=n.get("reserved_mib", 0) * MiB,
            budget=_mib(n, "budget_mib"),
            committed_others=n.get("committed_others_mib", 0) * MiB,
            available=_mib(n, "available_mib"),
        )
    unseen = None
    if "unseen" in case:
        unseen = Unseen(case["unseen"]["reason"], case["unseen"]["detail"])
    pod_limit = None
    if "pod_limit_mib" in case:
        pod_limit = CgroupLevel("/kubepods/pod1", case["pod_limit_mib"] * MiB)
    return Guards(cgroup=cgroup, unseen=unseen, node=node, pod_limit=pod_limit)


def _subset(got: Any, want: Any, where: str) -> None:
    """Every key ``want`` names has that value in ``got`` (nested objects alike)."""
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        for key, value in want.items():
            assert key in got, f"{where}.{key}"
            _subset(got[key], value, f"{where}.{key}")
    else:
        assert got == want, where


@pytest.mark.parametrize("case", case_params("plan"))
def test_plan_case(case: dict[str, Any], make_config: Callable[..., SizingConfig]) -> None:
    config = dict(case.get("config", {}))
    if "settings" in case:  # the [kata_mem] table, read by the real loader
        config["kata_mem"] = {**config.get("kata_mem", {}), **case["settings"]}
    cfg = make_config(**config)
    host = build_host(case["host"])

    def planned() -> tuple[VmState, Plan]:
        if "vm" in case:
            vm = build_vm(case["vm"])
        else:
            current = case.get("current_mib")
            # The VM Kata boots for the workload (with static sizing, at its static size).
            vm = assumed_vm(
                cfg, host, None if current is None else current * MiB, build_workload(case)
            )
        return vm, plan(cfg, host, build_workload(case), vm, build_guards(case))

    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(ConfigError) as info:
            planned()
        assert expect["error"] in info.value.message
        return
    vm, result = planned()
    m = result.memory
    got = {
        "host_mib": m.host // MiB,
        "max_mib": m.max // MiB,
        "base_mib": m.base // MiB,
        "requested_mib": -(-m.requested // MiB),
        "target_mib": m.target // MiB,
        "current_mib": m.current // MiB,
        "mechanism": m.mechanism,
        "block_mib": m.block // MiB,
        "clamped_by": [c.cause for c in m.clamps],
        "shrink": m.shrink,
        "steps": [[s.action, s.size // MiB, s.device] for s in m.steps],
        # The DIMM slots of the VM the plan was made for: the planner's assumed VM
        # unless the case gives one, not the configuration the loader read.
        "slots": vm.slots,
    }
    for key, want in expect.items():
        if key == "vcpus":
            v = result.vcpus
            got_v = {
                "target": v.target,
                "max": v.max,
                "default": v.default,
                "clamped_by": [c.cause for c in v.clamps],
            }
            for vkey, vwant in want.items():
                # A case's 1.7 vCPUs is the float32 Kata holds for the TOML's 1.7.
                exact = Fraction(float32(vwant)) if vkey == "default" else vwant
                assert got_v[vkey] == exact, f"vcpus.{vkey}"
        elif key == "warning":
            assert any(want in w for w in warnings_json(result.notes)), result.notes
        elif key == "no_warning":
            assert not any(want in w for w in warnings_json(result.notes)), result.notes
        elif key == "plan_json":
            _subset(plan_json(result, cfg)["memory"], want, "memory")
        elif key == "text":
            # Whole rows of what preview prints; the spaces that align a row's columns folded.
            rows = [" ".join(row.split()) for row in plan_text(result, cfg, "preview").splitlines()]
            for row in want:
                assert row in rows, "\n".join(rows)
        else:
            assert got[key] == want, key


def test_a_plan_sizes_its_workload_once(
    make_config: Callable[..., SizingConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Memory and vCPUs size the same workload: the plan-only answer computed it twice.
    # Counted on a real plan, which must stay what it was.
    import kata_mem.core.plan as front
    from kata_mem.core.plan.workload import demand as real
    from tests.support.configs import HOST

    cfg = make_config()
    work = Workload((Container("c1", memory_limit=512 * MiB, cpu=Fraction(1, 2)),))
    want = plan(cfg, HOST, work)
    calls: list[Workload] = []

    def counted(cfg: SizingConfig, workload: Workload) -> Any:
        calls.append(workload)
        return real(cfg, workload)

    monkeypatch.setattr(front, "demand", counted)
    assert plan(cfg, HOST, work) == want
    assert calls == [work]
