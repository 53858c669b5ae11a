"""kata_mem/edges/pod.py against the API server's and the kubelet's own code, at 1.35.4 and
1.37.2 (tests/oracle/kubernetes): generated Pod manifests (tests/strategies.py), JSON and
YAML, each decoded, defaulted and validated as the API server does it
(``SetDefaults_Pod``; at 1.37 also ``DefaultPodLevelResources``; ``ValidatePodCreate``),
and read by kata-mem's ``load_pod``. Compared: whether the Pod is refused, and for one both
take, the containers' aggregate limits of each resource (component-helpers
``AggregateContainerLimits``: init containers, sidecars and app containers, as the
planner's peak counts them) and the pod-level limits after defaulting.

The only differences allowed are the rows of docs/design/compared-with-kata.md
("Kubernetes") that ``documented`` names; anything else fails."""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, Optional, Union

import pytest
from hypothesis import HealthCheck, given, settings

from kata_mem.core.errors import InputError, QuantityError
from kata_mem.core.manifest import kubernetes_quantity, load_documents
from kata_mem.core.model import Container, Workload
from kata_mem.core.plan.workload import _peaks, demand
from kata_mem.core.units import INT64_MAX
from kata_mem.edges.config import load_config
from kata_mem.edges.pod import load_pod
from tests.strategies import pod_manifests
from tests.support.cases import case_params
from tests.support.oracle import Oracle, oracle_examples
from tests.support.paths import REPO

# The first test of a session may build the oracles: minutes on a machine whose Go caches
# are cold (docs/contributing/tests.md, "Differential tests").
pytestmark = [pytest.mark.go, pytest.mark.oracle, pytest.mark.timeout(900)]

ORACLE = settings(
    max_examples=oracle_examples(5),  # each case: two API servers and a file
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
#: The hugepage sizes of amd64, the host the manifests are read for.
PAGES = {"hugepages-2Mi": 2 << 20, "hugepages-1Gi": 1 << 30}


def _exact(text: str) -> Fraction:
    return Fraction(Decimal(text))


def _ours(path: Path, manifest: str) -> Union[Workload, str]:
    path.write_text(manifest)
    try:
        return load_pod(path, "amd64")
    except InputError as exc:
        return str(exc)


def _peak(containers: tuple[Container, ...], of: Callable[[Container], int]) -> int:
    return _peaks(containers, lambda c: Fraction(0), of)[0]


def aggregate_differences(ours: Workload, go: dict[str, Any]) -> list[str]:
    """The containers' aggregate limit of each resource: kata-mem's peak (planner
    ``_peaks``) against component-helpers ``AggregateContainerLimits``."""
    found = []
    theirs = {name: _exact(v) for name, v in go["container_limits"].items()}
    cs = ours.containers
    cpu = min(_peaks(cs, lambda c: c.cpu, lambda c: 0)[1], INT64_MAX)  # "above int64"
    if cpu != min(theirs.get("cpu", 0), INT64_MAX):
        found.append(f"cpu: kata-mem {cpu}, Go {theirs.get('cpu', 0)}")
    memory = min(_peak(cs, lambda c: c.memory_limit), INT64_MAX)  # "above int64"
    want = min(math.ceil(theirs.get("memory", 0)), INT64_MAX)
    # "fractions of a byte": kata-mem rounds each container's limit up to a byte, as the
    # kubelet writes it (Value()), before adding; so up to a byte a container above.
    if not 0 <= memory - want < max(len(cs), 1):
        found.append(f"memory: kata-mem {memory}, Go {theirs.get('memory', 0)}")
    for name, size in PAGES.items():
        pages = _peak(cs, lambda c, size=size: dict(c.hugepage_limits).get(size, 0))  # type: ignore[misc]
        pages = min(pages, INT64_MAX)
        if pages != min(theirs.get(name, 0), INT64_MAX):
            found.append(f"{name}: kata-mem {pages}, Go {theirs.get(name, 0)}")
    return found


def pod_level_differences(ours: Workload, go: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """The pod-level limits after defaulting: kata-mem's ``PodResources`` against the
    stored Pod's ``spec.resources.limits``."""
    found = []
    theirs = {name: _exact(v) for name, v in (go["pod_limits"] or {}).items()}
    pod = ours.pod
    ours_pages = dict(pod.hugepage_limits) if pod is not None else {}
    for name, size in PAGES.items():
        want = theirs.get(name, 0)
        if ours_pages.get(size, 0) != want:
            found.append(f"pod {name}: kata-mem {ours_pages.get(size, 0)}, Go {want}")
    limits = (given.get("resources") or {}).get("limits") or {}
    for name in ("memory", "cpu"):
        value = getattr(pod, name) if pod is not None else None
        if name in limits:  # given: kata-mem keeps it as the API server stores it
            stored = theirs.get(name)
            got = min(value if value is not None else Fraction(0), INT64_MAX)
            if stored is not None and got != min(
                math.ceil(stored) if name == "memory" else stored, INT64_MAX
            ):
                found.append(f"pod {name}: kata-mem {got}, Go {stored}")
        elif name in theirs:
            # Defaulted (1.37 DefaultPodLevelResources: every container limits it): to at
            # least the containers' aggregate, so that it never bounds them and kata-mem,
            # which sizes at min(pod limit, containers' peak), need not read it.
            aggregate = _exact(go["container_limits"].get(name, "0"))
            if theirs[name] < aggregate:
                found.append(f"pod {name} defaulted below the containers: {theirs[name]}")
    return found


#: A configuration to plan with: the demand of a Pod does not depend on it.
CONFIG = REPO / "configs" / "configuration-qemu.toml"


def demand_differences(ours: Workload, go: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """The row "the pod's size" (compared-with-kata.md, Kubernetes): under a pod-level
    memory or cpu limit, kata-mem's demand is component-helpers ``PodLimits`` (the pod
    cgroup's size) when some container has no limit of it, else the smaller of that and
    the containers' peak."""
    found = []
    limits = (given.get("resources") or {}).get("limits") or {}
    need, _ = demand(load_config(CONFIG), ours)
    peak_memory, peak_cpu = _peaks(ours.containers, lambda c: c.cpu, lambda c: c.memory_limit)
    for name, got, peak, unlimited in (
        ("memory", need.memory, peak_memory, any(c.memory_limit <= 0 for c in ours.containers)),
        ("cpu", need.cpu, peak_cpu, any(c.cpu <= 0 for c in ours.containers)),
    ):
        if name not in limits or name not in go["limits"]:
            continue
        exact = _exact(go["limits"][name])
        pod = min(Fraction(math.ceil(exact)) if name == "memory" else exact, Fraction(INT64_MAX))
        want = pod if unlimited else min(pod, peak, INT64_MAX)
        if min(got, INT64_MAX) != want:
            found.append(f"demand {name}: kata-mem {got}, PodLimits {pod}, expected {want}")
    return found


#: kata-mem's refusal of a quantity with no digit (".", "Ki", "e5"), which Go reads as 0.
_NO_DIGIT = re.compile(r"invalid quantity '[+-]?\.?(?:[eE][+-]?[0-9]*|[a-zA-Z]*)'")


def _refused(go: dict[str, Any]) -> bool:
    return bool(go.get("decode_error") or go["errors"])


def _beyond_int64(manifest: str) -> bool:
    """Whether a resource quantity of ``manifest`` is beyond a signed 64-bit integer, where
    Kubernetes' ``Quantity.Value`` overflows (10e18 is -2^63) and kata-mem counts 2^63-1."""
    try:
        spec = _spec(manifest)
    except (InputError, KeyError, TypeError):
        return False
    owners = [spec, *(c for c in spec.get("containers") or [] if isinstance(c, dict))]
    owners += [c for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    for owner in owners:
        resources = owner.get("resources")
        for part in ("limits", "requests"):
            values = resources.get(part) if isinstance(resources, dict) else None
            for value in values.values() if isinstance(values, dict) else ():
                try:
                    if abs(kubernetes_quantity(value, part)) > INT64_MAX:
                        return True
                except QuantityError:
                    continue
    return False


def documented(
    release: str,
    manifest: str,
    ours: Union[Workload, str],
    go: dict[str, Any],
    newest: dict[str, Any],
) -> Optional[str]:
    """The row of compared-with-kata.md ("Kubernetes") that explains why kata-mem decides
    a Pod otherwise than the API server at ``release`` (``go``; ``newest``: at 1.37), or
    None."""
    if isinstance(ours, str) and _NO_DIGIT.search(ours):
        return "a quantity without a digit"  # quantities: Go reads it as 0
    if _beyond_int64(manifest):
        return "a quantity above int64"  # Kubernetes' Value() overflows; kata-mem caps it
    if isinstance(ours, str) and "is not a hugepage size of amd64" in ours:
        return "a page size the host lacks"  # the API server takes any; no node offers it
    refused = isinstance(ours, str)
    if release != "1.37" and _refused(go) != _refused(newest) and _refused(newest) == refused:
        return "pod-level defaulting before 1.37"  # kata-mem follows 1.37
    return None


def pod_differences(
    release: str,
    manifest: str,
    ours: Union[Workload, str],
    go: dict[str, Any],
    newest: dict[str, Any],
) -> list[str]:
    """How kata-mem's reading of ``manifest`` differs from the API server's at
    ``release`` (``go``; ``newest``: its answer at 1.37), but for the documented rows."""
    refused_by_go = _refused(go)
    if isinstance(ours, str) or refused_by_go:
        if isinstance(ours, str) and refused_by_go:
            return []
        if documented(release, manifest, ours, go, newest):
            return []
        if isinstance(ours, str):
            return [f"{release}: kata-mem refuses ({ours}), the API server stores it"]
        why = go.get("decode_error") or go["errors"]
        return [f"{release}: the API server refuses ({why}), kata-mem reads it"]
    spec = _spec(manifest)
    return [
        f"{release}: {d}"
        for d in aggregate_differences(ours, go)
        + pod_level_differences(ours, go, spec)
        + demand_differences(ours, go, spec)
    ]


def _spec(manifest: str) -> dict[str, Any]:
    doc = load_documents(manifest, "case")[0]
    spec: dict[str, Any] = doc["spec"]
    return spec


@ORACLE
@given(pod_manifests())
def test_a_pod_is_read_as_kubernetes_stores_it(
    kubernetes_oracles: dict[str, Oracle], tmp_path: Path, manifest: str
) -> None:
    ours = _ours(tmp_path / "pod.yaml", manifest)
    answers = {
        r: o.ask({"op": "Pod", "manifest": manifest})["pod"] for r, o in kubernetes_oracles.items()
    }
    found = []
    for release, answer in answers.items():
        found += pod_differences(release, manifest, ours, answer, answers["1.37"])
    assert found == [], json.dumps(manifest)


@pytest.mark.parametrize("case", case_params("pod"))
def test_each_pod_case_is_decided_as_kubernetes_decides_it(
    kubernetes_oracles: dict[str, Oracle], tmp_path: Path, case: dict[str, Any]
) -> None:
    # tests/fixtures/pod-cases cites Kubernetes for each row: the API server at 1.37 refuses
    # exactly the rows that expect an error, and 1.35 too but for the documented rows.
    spec = copy.deepcopy(case["spec"])
    for container in spec["containers"] + spec.get("initContainers", []):
        container.setdefault("image", "registry.example/app:1")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
    manifest = json.dumps(pod)
    answers = {
        r: o.ask({"op": "Pod", "manifest": manifest})["pod"] for r, o in kubernetes_oracles.items()
    }
    assert _refused(answers["1.37"]) == ("error" in case["expect"]), answers["1.37"]
    ours = _ours(tmp_path / "pod.json", manifest)
    for release, answer in answers.items():
        assert pod_differences(release, manifest, ours, answer, answers["1.37"]) == []
