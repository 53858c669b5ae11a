"""Turn workload descriptions into :class:`~kata_mem.core.model.Container` values.

Sources: OCI ``config.json`` files (with the CRI sandbox-sizing annotations), command-line
quantities, and (read by :mod:`kata_mem.edges.pod`) a Kubernetes Pod manifest; one command
line's together make one sandbox's :class:`~kata_mem.core.model.Workload`
(:func:`build_workload`). Each reader validates at once and raises
:class:`~kata_mem.core.errors.InputError` naming the file, the field and what was expected.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any, Optional

from kata_mem.core.annotations import hypervisor_annotations
from kata_mem.core.arch import HUGEPAGE_SIZES
from kata_mem.core.cpuset import cpuset_size
from kata_mem.core.cri_annotations import SANDBOX_SIZING_KEYS, overhead_annotation, sandbox_sizing
from kata_mem.core.errors import InputError
from kata_mem.core.fields import Fields, KeyOnce, python_value, spelled_float
from kata_mem.core.fields import path as field_path
from kata_mem.core.model import (
    Arch,
    Container,
    PodResources,
    SandboxSizing,
    Workload,
    unique_containers,
)
from kata_mem.core.quantity import cpu_count, quantity_bytes
from kata_mem.core.units import INT64_MAX
from kata_mem.edges.files import read_input_text
from kata_mem.edges.pod import load_pod

ANN_CONTAINER_TYPE = ("io.kubernetes.cri.container-type", "io.kubernetes.cri-o.ContainerType")
ANN_CONTAINER_NAME = "io.kubernetes.cri.container-name"


# --- OCI runtime specs -----------------------------------------------------------


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


#: Longest integer an OCI spec may hold, in digits: its integers are Go int64s and
#: uint64s (20 digits); far longer ones would only reach Python's digit limit for int().
_OCI_DIGITS = 40


def _oci_int(path: Path) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if len(text.lstrip("-").lstrip("0")) > _OCI_DIGITS:
            raise InputError(
                f"{path}: an integer of {len(text.lstrip('-'))} digits; expected a 64-bit "
                "integer, as an OCI spec has"
            )
        return int(text)

    return parse


def _page_size_name(size: int) -> str:
    """The name the kernel gives a hugepage size in cgroup files (mm/hugetlb_cgroup.c
    ``mem_fmt``: ``hugetlb.2MB.limit_in_bytes``), which OCI ``pageSize`` must be, since
    runc writes that file."""
    unit, shift = next(u for u in (("GB", 30), ("MB", 20), ("KB", 10)) if size >= 1 << u[1])
    return f"{size >> shift}{unit}"


def read_oci(
    path: Path, arch: Arch
) -> tuple[
    Optional[Container],
    Optional[SandboxSizing],
    Optional[tuple[int, str]],
    tuple[tuple[str, str], ...],
]:
    """A container (or, for a sandbox spec, the pod sizing, the pod overhead with the
    annotation that gave it, and Kata's hypervisor annotations) from an OCI ``config.json``.

    ``linux.resources.memory.limit`` (bytes; -1 or absent = no limit),
    ``hugepageLimits[].limit`` (of a ``pageSize`` the host's architecture ``arch``
    has), CPU ``quota``/``period`` and the cpuset ``cpus``. A sandbox (pause) spec
    contributes its ``io.kubernetes.cri.sandbox-*`` annotations instead.

    :raises InputError: invalid JSON, a key given twice, or a field of the wrong type,
        named by path.
    """
    text = read_input_text(path, "OCI spec")
    once = KeyOnce()
    try:
        spec = json.loads(
            text,
            parse_constant=_not_json,
            parse_int=_oci_int(path),
            parse_float=spelled_float,
            object_pairs_hook=once,
        )
    except RecursionError as exc:
        raise InputError(
            f"{path}: nested too deeply to read (more than a few hundred levels of arrays and"
            " objects); an OCI spec is a few levels deep"
        ) from exc
    except ValueError as exc:  # JSONDecodeError, NaN, or an integer too long to convert
        raise InputError(f"{path}: invalid JSON: {exc}") from exc
    once.check(spec, f"{path}:")
    if not isinstance(spec, dict):
        raise InputError(f"{path}: expected an OCI runtime spec (a JSON object)")
    spec_fields = Fields(f"{path}:", show=python_value)
    annotations = spec_fields.mapping(spec, "annotations", expected="an object") or {}
    for key, value in annotations.items():
        if not isinstance(value, str):
            raise spec_fields.fail(field_path("annotations", key), "a string", value)
    if any(annotations.get(k) == "sandbox" for k in ANN_CONTAINER_TYPE) or any(
        k in annotations for k in SANDBOX_SIZING_KEYS
    ):
        where = str(path)
        return (
            None,
            sandbox_sizing(annotations, where),
            overhead_annotation(annotations, where),
            hypervisor_annotations(annotations),
        )

    def mapping(obj: dict[str, Any], key: str, at: str) -> dict[str, Any]:
        return spec_fields.mapping(obj, key, at, expected="an object") or {}

    def integer(obj: dict[str, Any], key: str, at: str) -> int:
        # An OCI spec's integers are Go int64s, but kata-mem never refused larger ones.
        return spec_fields.integer(obj, key, at, minimum=None, maximum=None) or 0

    resources = mapping(mapping(spec, "linux", ""), "resources", "linux")
    limit = integer(
        mapping(resources, "memory", "linux.resources"), "limit", "linux.resources.memory"
    )
    hugepages = 0
    by_size: list[tuple[int, int]] = []
    pages = resources.get("hugepageLimits") or []
    if not isinstance(pages, list):
        raise spec_fields.fail("linux.resources.hugepageLimits", "a list", pages)
    sizes: dict[str, str] = {}
    for i, page in enumerate(pages):
        at = f"linux.resources.hugepageLimits[{i}]"
        if not isinstance(page, dict):
            raise spec_fields.fail(at, "an object", page)
        names = [_page_size_name(size) for size in HUGEPAGE_SIZES[arch]]
        size = page.get("pageSize")
        if size not in names:
            raise spec_fields.fail(
                field_path(at, "pageSize"),
                f"a hugepage size of {arch}: " + " or ".join(names),
                size,
            )
        if size in sizes:
            # One cgroup file per page size (hugetlb.<size>.limit_in_bytes): runc writes
            # both, and the last one is the limit, so neither the sum nor the first is.
            raise InputError(
                f"{path}: {at}.pageSize: {size!r} is also that of {sizes[size]}; expected "
                "each page size once"
            )
        sizes[size] = at
        limit_of_size = min(max(integer(page, "limit", at), 0), INT64_MAX)
        hugepages += limit_of_size
        by_size.append((HUGEPAGE_SIZES[arch][names.index(size)], limit_of_size))
    cpu_obj = mapping(resources, "cpu", "linux.resources")
    quota = integer(cpu_obj, "quota", "linux.resources.cpu")
    period = integer(cpu_obj, "period", "linux.resources.cpu")
    cpu = Fraction(quota, period) if quota > 0 and period > 0 else Fraction(0)
    cpus = cpu_obj.get("cpus")
    if cpus is not None and not isinstance(cpus, str):
        raise spec_fields.fail("linux.resources.cpu.cpus", "a string", cpus)
    cpuset = cpuset_size(cpus or "", spec_fields.name("linux.resources.cpu.cpus"))
    # A bundle's spec is its folder's config.json, so the folder names the container; any
    # other file is a container of its own (two specs of one folder are two containers).
    bundle = path.name == "config.json" and path.parent.name
    name = annotations.get(ANN_CONTAINER_NAME) or bundle or str(path)
    return (
        Container(
            name,
            max(limit, 0),
            min(hugepages, INT64_MAX),
            cpu,
            "app",
            "running",
            str(path),
            cpuset_cpus=cpuset,
            hugepage_limits=tuple(sorted(by_size)),
        ),
        None,
        None,
        (),
    )


# --- Command line -----------------------------------------------------------------


def cli_containers(limits: tuple[str, ...], cpus: tuple[str, ...]) -> tuple[Container, ...]:
    """One container per ``--limit`` and per ``--cpu`` value.

    :raises QuantityError: for a value that is not a quantity or is negative.
    """
    out = [
        Container(
            f"--limit #{i + 1}",
            quantity_bytes(q, f"--limit {q[:40]!r}{'...' if len(q) > 40 else ''}"),
            origin="--limit",
        )
        for i, q in enumerate(limits)
    ]
    for i, q in enumerate(cpus):
        cpu = cpu_count(q, f"--cpu {q[:40]!r}{'...' if len(q) > 40 else ''}")
        out.append(Container(f"--cpu #{i + 1}", cpu=cpu, origin="--cpu"))
    return tuple(out)


def build_workload(
    pod: Optional[Path],
    oci: tuple[Path, ...],
    limits: tuple[str, ...],
    cpus: tuple[str, ...],
    arch: Arch,
) -> Workload:
    """Everything given on one command line, as one sandbox's workload, on a host of
    architecture ``arch`` (which hugepage sizes exist).

    :raises InputError: from any of the readers.
    """
    containers: list[Container] = []
    sizing: Optional[SandboxSizing] = None
    overhead: Optional[int] = None
    origin = ""
    pod_resources: Optional[PodResources] = None
    hypervisor: list[tuple[str, str]] = []
    from_where: list[str] = []
    if pod is not None:
        manifest = load_pod(pod, arch)
        containers += manifest.containers
        overhead, origin = manifest.overhead, manifest.overhead_origin
        pod_resources = manifest.pod
        hypervisor += manifest.hypervisor
        from_where += [manifest.hypervisor_origin] if manifest.hypervisor else []
    for spec in oci:
        container, spec_sizing, spec_overhead, spec_hypervisor = read_oci(spec, arch)
        hypervisor += spec_hypervisor  # Kata reads them in the sandbox spec: after the Pod's
        from_where += [f"{spec}: annotations"] if spec_hypervisor else []
        if container is not None:
            containers.append(container)
        if spec_overhead is not None and overhead is None:  # the Pod's own field comes first
            overhead, origin = spec_overhead[0], f"{spec}: annotation {spec_overhead[1]}"
        if spec_sizing is not None:
            if sizing is not None:
                raise InputError(
                    f"{spec}: a second sandbox spec; expected at most one (first: {sizing.origin})"
                )
            sizing = spec_sizing
    containers += cli_containers(limits, cpus)
    return Workload(
        unique_containers(tuple(containers)),
        sizing,
        overhead,
        origin,
        pod_resources,
        tuple(hypervisor),
        ", ".join(from_where),
    )
