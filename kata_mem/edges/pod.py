"""Read a Kubernetes Pod manifest (YAML or JSON) as the API server would store it: its
containers as :class:`~kata_mem.core.model.Container` values, its pod-level resources, its
``spec.overhead`` and Kata's hypervisor annotations.

The resources are defaulted and validated as Kubernetes does before it stores a Pod (the
functions cited below are in kubernetes/kubernetes), so a Pod the API server refuses is refused
here, naming the field, and never sized. The OCI and command-line readers are in
:mod:`kata_mem.edges.sources`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any, Optional, Union

from kata_mem.core.annotations import hypervisor_annotations
from kata_mem.core.arch import check_hugepage_size
from kata_mem.core.errors import InputError, QuantityError
from kata_mem.core.model import (
    Arch,
    Container,
    PodResources,
    Role,
    Workload,
)
from kata_mem.core.quantity import parse_quantity
from kata_mem.core.units import INT64_MAX
from kata_mem.core.values import Frozen
from kata_mem.edges.files import read_input_text


def read_pod(path: Path, arch: Arch) -> tuple[Container, ...]:
    """The containers of the one Pod in a manifest (:func:`load_pod`)."""
    return load_pod(path, arch).containers


def load_pod(path: Path, arch: Arch) -> Workload:
    """The containers of the one Pod in a YAML or JSON manifest, read as Kubernetes reads
    it (:mod:`kata_mem.core.manifest`), and its ``spec.overhead.memory`` (the RuntimeClass
    overhead the admission controller filled in), when set. ``arch`` is the host's: it
    says which ``hugepages-<size>`` limits exist.

    The resources are defaulted and checked as the API server does before it stores the
    Pod (:func:`_pod_level`), so a Pod it refuses is refused here and never sized.

    :raises InputError: unreadable file, invalid YAML/JSON, a key given twice, no Pod,
        no containers, two containers of one name, a bad resource value (named by its
        field path), or resources the API server refuses.
    """
    from kata_mem.core.manifest import load_documents

    docs = load_documents(read_input_text(path, "Pod manifest"), str(path))
    pods = [d for d in docs if isinstance(d, dict) and d.get("kind") == "Pod"]
    if len(pods) != 1:
        found = f"{len(pods)} Pods" if pods else "no document with kind: Pod"
        raise InputError(f"{path}: expected one Pod manifest (kind: Pod), found {found}")
    read = _pod_containers(pods[0], str(path), arch)
    containers = tuple(c.container for c in read)
    spec = pods[0]["spec"]
    pod = _pod_level(spec, read, str(path), arch)
    hypervisor = _pod_annotations(pods[0], str(path))
    shown = f"{path}: metadata.annotations" if hypervisor else ""
    overhead = spec.get("overhead")
    if overhead is None or (isinstance(overhead, dict) and overhead.get("memory") is None):
        return Workload(containers, pod=pod, hypervisor=hypervisor, hypervisor_origin=shown)
    if not isinstance(overhead, dict):
        raise InputError(f"{path}: spec.overhead: expected a mapping of resources")
    memory = _yaml_quantity_bytes(overhead["memory"], f"{path}: spec.overhead.memory")
    return Workload(
        containers,
        overhead=memory,
        overhead_origin=f"{path}: spec.overhead.memory",
        pod=pod,
        hypervisor=hypervisor,
        hypervisor_origin=shown,
    )


def _pod_annotations(pod: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    """Kata's hypervisor annotations among the Pod's ``metadata.annotations``: the pod
    annotations containerd and CRI-O hand the runtime in the sandbox spec when its
    ``pod_annotations`` lets them through, as Kata reads them there."""
    meta = pod.get("metadata") or {}
    if not isinstance(meta, dict):
        raise InputError(f"{where}: metadata: expected a mapping")
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        raise InputError(f"{where}: metadata.annotations: expected a mapping of strings")
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise InputError(
                f"{where}: metadata.annotations.{key}: {_shown(value)}; expected a string, "
                "as Kubernetes has it"
            )
    return hypervisor_annotations({str(k): v for k, v in annotations.items()})


# --- Kubernetes' defaulting and validation of a Pod's resources ----------------------
#
# The API server defaults a Pod before it validates and stores it (pkg/apis/core/v1/
# defaults.go ``SetDefaults_Pod``), so kata-mem checks the defaulted resources. Only the
# resources kata-mem sizes from are read: cpu, memory and hugepages-<size> (a
# hugepage resource is keyed by its page size in bytes). Each rule is a row of
# tests/fixtures/pod-cases, citing the upstream function.

#: A resource kata-mem reads: "cpu", "memory", or a hugepage size in bytes.
_Key = Union[str, int]
_Resources = dict[_Key, Fraction]


class _Read(Frozen):
    """A container of a Pod manifest with its resources as the API server defaults them
    (a request it does not set is its limit) and where it is in the manifest."""

    container: Container
    at: str
    limits: _Resources
    requests: _Resources


def _name(key: _Key) -> str:
    """The Kubernetes resource name of ``key``: cpu, memory, hugepages-2Mi."""
    from kata_mem.core.quantity import format_quantity

    return key if isinstance(key, str) else f"hugepages-{format_quantity(Fraction(key))}"


def _q(value: Fraction) -> str:
    """A quantity as a manifest would write it: 1280Mi, 2, 500m."""
    from kata_mem.core.quantity import format_quantity

    if value.denominator != 1 and (value * 1000).denominator == 1:
        return f"{value * 1000}m"
    return format_quantity(value)


def _resource_list(items: Any, where: str, at: str, arch: Arch) -> _Resources:
    """The cpu, memory and hugepages of a ``limits`` or ``requests`` mapping."""
    if items is None:
        return {}
    if not isinstance(items, dict):
        raise InputError(f"{where}: {at}: expected a mapping")
    out: _Resources = {}
    for key, value in items.items():
        field = f"{where}: {at}.{key}"
        if key in ("memory", "cpu"):
            amount = _yaml_quantity(value, field)
            if amount < 0:
                what = "a size" if key == "memory" else "CPUs"
                raise InputError(
                    f"{field}: {_shown(value)} is negative; expected {what} of 0 or more"
                )
            out[key] = amount
        elif isinstance(key, str) and key.startswith("hugepages-"):
            size = _hugepage_resource(key, field, arch)
            if size in out:
                raise InputError(
                    f"{field}: names the page size of {at}.{_name(size)} again; expected "
                    "each page size once (the kubelet keeps one limit per page size, "
                    "HugePageLimits, so two names of one size are not two limits)"
                )
            whole = _yaml_quantity_bytes(value, field)
            if whole % size:
                # pkg/apis/core/validation/validation.go validateResourceQuantityHugePageValue
                # (pkg/apis/core/helper/helpers.go IsHugePageResourceValueDivisible): the
                # value, rounded up to a byte, a whole number of pages; 0 is one.
                raise InputError(
                    f"{field}: {_shown(value)} is not a whole number of "
                    f"{_q(Fraction(size))} pages; expected a multiple of the page size, "
                    "as Kubernetes requires"
                )
            out[size] = Fraction(whole)
    return out


def _aggregate(read: list[_Read], of: Callable[[_Read], _Resources]) -> _Resources:
    """The containers' effective total of each resource: the larger of the app
    containers with every sidecar and each init container with the sidecars declared
    before it (component-helpers resource/helpers.go ``aggregateContainerResourcesByFn``)."""
    total: _Resources = {}
    sidecars: _Resources = {}
    inits: _Resources = {}
    for r in read:
        res = of(r)
        if r.container.role == "init":
            for key in set(res) | set(sidecars):
                inits[key] = max(
                    inits.get(key, Fraction(0)),
                    res.get(key, Fraction(0)) + sidecars.get(key, Fraction(0)),
                )
            continue
        for key, value in res.items():
            total[key] = total.get(key, Fraction(0)) + value
            if r.container.role == "sidecar":
                sidecars[key] = sidecars.get(key, Fraction(0)) + value
    for key, value in inits.items():
        total[key] = max(total.get(key, Fraction(0)), value)
    return total


def _check_hugepages_with_cpu_or_memory(
    requests: _Resources, limits: _Resources, where: str, at: str
) -> None:
    """pkg/apis/core/validation/validation.go ``validateResourceRequirements``:
    "HugePages require cpu or memory": hugepages in the limits or requests, neither cpu
    nor memory there."""
    names = set(requests) | set(limits)
    if any(isinstance(k, int) for k in names) and not names & {"cpu", "memory"}:
        pages = ", ".join(sorted(_name(k) for k in names if isinstance(k, int)))
        raise InputError(
            f"{where}: {at}: {pages} without cpu or memory; expected a cpu or memory "
            "request or limit beside hugepages, as Kubernetes requires"
        )


def _check_requests(
    requests: _Resources, limits: _Resources, where: str, at: str, defaulted: str
) -> None:
    """pkg/apis/core/validation/validation.go ``ValidateResourceRequirements`` (and
    ``validatePodResourceRequirements`` at the pod level): a request at most its limit,
    and for hugepages, which cannot be overcommitted, equal to it; a hugepage request
    needs a limit."""
    for key, request in requests.items():
        field = f"{where}: {at}.requests.{_name(key)}"
        limit = limits.get(key)
        if limit is None:
            if isinstance(key, int):
                raise InputError(
                    f"{field}: {_q(request)} without {at}.limits.{_name(key)}; expected a "
                    "hugepage limit wherever a hugepage request is set, as Kubernetes "
                    "requires of resources that cannot be overcommitted"
                )
            continue
        if isinstance(key, int) and request != limit:
            raise InputError(
                f"{field}: {_q(request)}{defaulted} differs from {at}.limits.{_name(key)} "
                f"{_q(limit)}; expected a hugepage request equal to its limit, as Kubernetes "
                "requires of resources that cannot be overcommitted"
            )
        if request > limit:
            raise InputError(
                f"{field}: {_q(request)}{defaulted} is above {at}.limits.{_name(key)} "
                f"{_q(limit)}; expected a request of at most the limit, as Kubernetes requires"
            )


def _pod_level(
    spec: dict[str, Any], read: list[_Read], where: str, arch: Arch
) -> Optional[PodResources]:
    """The Pod's pod-level limits (KEP-2837 ``spec.resources``), defaulted and checked
    against its containers as the API server of Kubernetes 1.37 does, or None when it
    sets none.

    Defaulting (pkg/api/pod/util.go ``DefaultPodLevelResources``, which the registry's
    ``PrepareForCreate`` runs from 1.37, PodLevelResourcesFixDefaulting; before, a part of
    it ran in pkg/apis/core/v1/defaults.go ``SetDefaults_Pod``: compared-with-kata.md,
    "Kubernetes"), in its order: ``defaultHugePagePodLevelLimits`` fills a hugepage size
    the pod names neither a limit nor a request of from the containers' total limit of
    that size; ``defaultPodLevelRequests`` fills the pod's cpu and memory requests from
    the containers' total requests, then any other request from the pod's limit;
    ``defaultPodLevelLimits`` fills the limit of a resource the pod requests without a
    limit, when every container (init containers and sidecars too) limits it, with the
    larger of the pod's request and the containers' total limit. Validation
    (pkg/apis/core/validation/validation.go ``validatePodResources``): the pod's requests
    within its limits (hugepages equal, and with cpu or memory beside them), and
    (``validatePodResourceConsistency``) each pod request that is set at least the
    containers' total request, each hugepage limit at least the containers' total limit,
    and each app container's limit at most the pod's (init containers and sidecars are
    not bounded there, only through their requests).

    The limits returned are the pod's memory and cpu limits as given, and its hugepage
    limits with the sizes filled in: the kubelet limits the pod cgroup to them
    (pkg/kubelet/cm/helpers_linux.go ``ResourceConfigForPod``, ``HugePageLimits``). A
    defaulted memory or cpu limit is never below the containers' peak, the figure
    kata-mem sizes from when every container is limited, so it is not kept."""
    resources = spec.get("resources")
    if resources is None:
        return None
    if not isinstance(resources, dict):
        raise InputError(f"{where}: spec.resources: expected a mapping")
    at = "spec.resources"
    given_limits = _resource_list(resources.get("limits"), where, f"{at}.limits", arch)
    given_requests = _resource_list(resources.get("requests"), where, f"{at}.requests", arch)
    if not given_limits and not given_requests:
        # Nothing kata-mem reads is set at the pod level (component-helpers
        # ``IsPodLevelResourcesSet``): read as no pod-level resources, never refused for
        # the containers' requests it would then be compared with.
        return PodResources(origin=f"{where}: {at}.limits")
    limits, requests = dict(given_limits), dict(given_requests)
    container_limits = _aggregate(read, lambda r: r.limits)
    container_requests = _aggregate(read, lambda r: r.requests)
    for key, total in container_limits.items():  # defaultHugePagePodLevelLimits
        if isinstance(key, int) and key not in requests and key not in limits:
            limits[key] = total
    from_containers: _Resources = {}
    for key, total in container_requests.items():  # defaultPodLevelRequests
        if isinstance(key, str) and key not in requests:  # cpu and memory: overcommitted
            requests[key] = from_containers[key] = total
    for key, limit in limits.items():
        requests.setdefault(key, limit)
    for key, request in requests.items():  # defaultPodLevelLimits
        if key not in limits and all(key in r.limits for r in read):
            limits[key] = max(request, container_limits[key])
    for r in read:  # validatePodResourceConsistency
        if r.container.role != "app":
            continue  # only spec.containers are bounded by the pod's limits
        for key, limit in r.limits.items():
            cap = limits.get(key)
            if cap is not None and limit > cap:
                raise InputError(
                    f"{where}: {r.at}.resources.limits.{_name(key)}: {_q(limit)} is above the "
                    f"pod's {at}.limits.{_name(key)} ({_q(cap)}); expected each app "
                    "container's limit at most the pod's, as Kubernetes requires"
                )
    _check_requests(given_requests, limits, where, at, "")
    _check_requests(
        from_containers,
        limits,
        where,
        at,
        " (not set, so the API server sets it to the containers' total request, a"
        " container's request being its limit when not set)",
    )
    _check_hugepages_with_cpu_or_memory(requests, limits, where, at)
    for key, total in container_requests.items():
        have = requests.get(key)
        if have is not None and total > have:  # a pod request not set bounds nothing
            raise InputError(
                f"{where}: {at}.requests.{_name(key)}: {_q(have)} is below the containers' total "
                f"request of {_q(total)} (a container's request defaults to its limit); "
                "expected pod-level requests of at least the containers' total, as "
                "Kubernetes requires"
            )
    for key, total in container_limits.items():
        cap = limits.get(key)
        if isinstance(key, int) and cap is not None and total > cap:
            raise InputError(
                f"{where}: {at}.limits.{_name(key)}: {_q(cap)} is below the containers' total "
                f"limit of {_q(total)}; expected a pod-level hugepage limit of at least the "
                "containers' total, as Kubernetes requires of resources that cannot be "
                "overcommitted"
            )
    pages = tuple(sorted((k, int(v)) for k, v in limits.items() if isinstance(k, int) and v > 0))
    memory, cpu = given_limits.get("memory"), given_limits.get("cpu")
    return PodResources(
        min(math.ceil(memory), INT64_MAX) if memory else None,
        cpu if cpu else None,
        min(sum(v for _, v in pages), INT64_MAX) if pages else None,
        f"{where}: {at}.limits",
        pages,
    )


def _pod_containers(pod: dict[str, Any], where: str, arch: Arch) -> list[_Read]:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise InputError(f"{where}: spec: expected a mapping with containers")
    apps = spec.get("containers")
    if not isinstance(apps, list) or not apps:
        raise InputError(f"{where}: spec.containers: expected a non-empty list of containers")
    inits = spec.get("initContainers", [])
    if inits is None:
        inits = []
    if not isinstance(inits, list):
        raise InputError(f"{where}: spec.initContainers: expected a list")
    out: list[_Read] = []
    named: dict[str, str] = {}
    for field, items in (("initContainers", inits), ("containers", apps)):
        for i, item in enumerate(items):
            at = f"spec.{field}[{i}]"
            if not isinstance(item, dict):
                raise InputError(f"{where}: {at}: expected a container mapping")
            role: Role = "app"
            if field == "initContainers":
                role = _init_role(item.get("restartPolicy", None), where, at)
            read = _pod_container(item, role, where, at, arch)
            name = read.container.name
            if name in named:
                # Kubernetes refuses the Pod (ValidatePodSpec: names are unique across
                # init and app containers); counting both would size a pod that never runs.
                raise InputError(
                    f"{where}: {at}.name: {name!r} is also the name of "
                    f"{named[name]}; expected each container name once, as "
                    "Kubernetes does"
                )
            named[name] = at
            out.append(read)
    return out


def pod_containers(pod: dict[str, Any], where: str, arch: Arch) -> tuple[Container, ...]:
    return tuple(r.container for r in _pod_containers(pod, where, arch))


def _init_role(policy: Any, where: str, at: str) -> Role:
    """An init container's role: a sidecar with ``restartPolicy: Always``, else a plain
    init container, which ``OnFailure`` and ``Never`` keep being (pkg/apis/core/validation/
    validation.go ``validateInitContainerRestartPolicy``: with ContainerRestartRules, beta
    and on from 1.35, ``validateContainerRestartPolicy`` takes all three; component-helpers
    ``isRestartableInitContainer``: only Always makes a sidecar). Kubernetes refuses any
    other value (NotSupported), so the Pod never runs, and is not sized."""
    if policy is None or policy in ("OnFailure", "Never"):
        return "init"
    if policy != "Always":
        raise InputError(
            f"{where}: {at}.restartPolicy: {_shown(policy)}: expected Always (a sidecar), "
            "OnFailure, Never or no restartPolicy, as Kubernetes takes on an init container"
        )
    return "sidecar"


def _pod_container(item: dict[str, Any], role: Role, where: str, at: str, arch: Arch) -> _Read:
    name = item.get("name")
    if not isinstance(name, str) or not name:
        # Kubernetes refuses the Pod (validation.go ``validateContainerCommon``: the name
        # is required; a number does not decode into the string it is): two containers
        # without one would otherwise be counted as two.
        shown = "no name" if name is None else _shown(name)
        raise InputError(
            f"{where}: {at}.name: {shown}; expected a container name (a non-empty string), "
            "as Kubernetes requires"
        )
    resources = item.get("resources") or {}
    if not isinstance(resources, dict):
        raise InputError(f"{where}: {at}.resources: expected a mapping")
    limits = _resource_list(resources.get("limits") or {}, where, f"{at}.resources.limits", arch)
    given = _resource_list(resources.get("requests") or {}, where, f"{at}.resources.requests", arch)
    # SetDefaults_Pod: a request not given is the limit (validated after defaulting).
    requests = {**limits, **given}
    _check_requests(given, limits, where, f"{at}.resources", "")
    _check_hugepages_with_cpu_or_memory(requests, limits, where, f"{at}.resources")
    pages = tuple(sorted((k, int(v)) for k, v in limits.items() if isinstance(k, int)))
    memory = limits.get("memory", Fraction(0))
    container = Container(
        name,
        min(math.ceil(memory), INT64_MAX),
        min(sum(v for _, v in pages), INT64_MAX),
        limits.get("cpu", Fraction(0)),
        role,
        "running",
        f"{where}: {at}",
        hugepage_limits=pages,
    )
    return _Read(container, at, limits, requests)


def _hugepage_resource(key: str, field: str, arch: Arch) -> int:
    """The page size a ``hugepages-<size>`` resource names, a hugepage size of the host's
    architecture: Kubernetes reads ``<size>`` as a quantity
    (``HugePageSizeFromResourceName``) and the node offers only the sizes its kernel
    has, so any other never schedules."""
    size = key[len("hugepages-") :]
    try:
        value = parse_quantity(size)
    except QuantityError as exc:
        raise InputError(
            f"{field}: {size!r} is not a page size; expected hugepages-<size> with a "
            f"hugepage size of {arch}, e.g. hugepages-2Mi"
        ) from exc
    if value.denominator != 1 or value <= 0:
        raise InputError(f"{field}: {size!r} is not a page size; expected e.g. hugepages-2Mi")
    return check_hugepage_size(int(value), arch, field)


def _yaml_quantity(value: Any, field: str) -> Fraction:
    """A resource quantity of the Pod as the API server stores it: read as Kubernetes
    reads it, then rounded up, away from zero, to a thousandth (pkg/apis/core/v1/
    defaults.go ``SetDefaults_ResourceList``, ``Quantity.RoundUp(-3)``: 1.5n of a CPU is
    1m)."""
    from kata_mem.core.manifest import kubernetes_quantity

    amount = kubernetes_quantity(value, field)
    thousandths = amount * 1000
    if thousandths.denominator == 1:
        return amount
    away = -(-abs(thousandths.numerator) // thousandths.denominator)
    return Fraction(away if amount > 0 else -away, 1000)


def _yaml_quantity_bytes(value: Any, field: str) -> int:
    amount = _yaml_quantity(value, field)
    if amount < 0:
        raise InputError(f"{field}: {_shown(value)} is negative; expected a size of 0 or more")
    return min(math.ceil(amount), INT64_MAX)


def _shown(value: Any) -> str:
    """A manifest value as Kubernetes sees it, for messages."""
    from kata_mem.core.manifest import json_text

    try:
        return json_text(value)
    except ValueError:  # NaN or an infinity, which no JSON text holds: as YAML has it
        return repr(value)
