"""``kata-mem runtimeclass``'s output: the RuntimeClass manifest (YAML, its arithmetic in
comments) and the same as JSON (``kata-mem/runtimeclass/v1``)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional

import yaml

from kata_mem.core.golang import format_float32
from kata_mem.core.runtimeclass import PodFit, RuntimeClassOverhead, fmt_limits
from kata_mem.core.units import fmt_bytes, to_mib_ceil

#: The label kata-deploy puts on the nodes it installed Kata on (kata-containers
#: tools/packaging/kata-deploy).
NODE_LABEL = "katacontainers.io/kata-runtime"
#: kata-deploy's RuntimeClass (and handler) name for a configuration's hypervisor section,
#: where it is not ``kata-`` + the section's name (tools/packaging/kata-deploy/
#: runtimeclasses: kata-qemu.yaml, kata-clh.yaml, kata-fc.yaml, kata-dragonball.yaml).
SHORT_NAMES = {"firecracker": "fc"}
#: What kata-mem's RuntimeClasses are called, before the hypervisor's short name: never a
#: name of kata-deploy's, whose RuntimeClass applying ours would replace (and deleting ours,
#: delete).
NAME_PREFIX = "kata-mem-"

#: ``--cpu-policy``: what ``podFixed.cpu`` reserves beyond the pod's CPU limits.
CPU_POLICIES = ("kata", "all-vcpus", "none")
#: kata-deploy's own RuntimeClasses set ``podFixed.cpu: 250m`` (kata-qemu.yaml and the
#: others of tools/packaging/kata-deploy/runtimeclasses).
KATA_POD_FIXED_CPU_MILLIS = 250


def default_handler(hypervisor: str) -> str:
    """kata-deploy's runtime handler (and RuntimeClass name) for this hypervisor
    (``kata-qemu``, ``kata-clh``): what the node's CRI runtime knows Kata by."""
    return f"kata-{SHORT_NAMES.get(hypervisor, hypervisor)}"


def default_name(hypervisor: str) -> str:
    """kata-mem's RuntimeClass for this hypervisor (``kata-mem-qemu``), beside kata-deploy's."""
    return f"{NAME_PREFIX}{SHORT_NAMES.get(hypervisor, hypervisor)}"


def pod_fixed_cpu(o: RuntimeClassOverhead, policy: str) -> Optional[int]:
    """The millicores ``podFixed.cpu`` reserves under ``policy`` (None: left out)."""
    if policy == "none":
        return None
    if policy == "all-vcpus":
        return o.cpu_millis
    return KATA_POD_FIXED_CPU_MILLIS


def _cpu(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def manifest(o: RuntimeClassOverhead, name: str, handler: str, cpu_policy: str) -> dict[str, Any]:
    pod_fixed: dict[str, str] = {"memory": f"{to_mib_ceil(o.memory)}Mi"}
    cpu = pod_fixed_cpu(o, cpu_policy)
    if cpu is not None:
        pod_fixed["cpu"] = _cpu(cpu)
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": name},
        "handler": handler,
        "overhead": {"podFixed": pod_fixed},
        "scheduling": {"nodeSelector": {NODE_LABEL: "true"}},
    }


def _vm_rule(o: RuntimeClassOverhead) -> str:
    wanted = (
        f"default_memory {fmt_bytes(o.boot)} + limits"
        if o.sizing == "kata"
        else "the limits (at least the boot memory)"
    )
    maximum = f", at most default_maxmemory {fmt_bytes(o.maximum)}" if o.maximum else ""
    if o.static:
        return (
            f"VM = {wanted}, whole MiB, sized at boot by Kata (static_sandbox_resource_mgmt) "
            f"and after it by kata-mem ({o.mechanism})"
        )
    return (
        f"VM = {wanted}, in whole {fmt_bytes(o.block)} blocks above the boot memory "
        f"{fmt_bytes(o.boot)} ({o.mechanism}){maximum}"
    )


def _pod(f: PodFit) -> str:
    # What the guard is asked to admit, when it is not the VM, is what the cgroup must hold.
    asked = "" if f.asked == f.vm else f" (the guard is asked for {fmt_bytes(f.asked)})"
    return (
        f"limits {fmt_limits(f.limits)} -> VM {fmt_bytes(f.vm)}{asked}, VMM overhead "
        f"{fmt_bytes(f.vmm_overhead)}: cgroup >= {fmt_bytes(f.needed)}, podFixed >= "
        f"{fmt_limits(max(f.pod_fixed, 0))}"
    )


def _naming(name: str, handler: str) -> str:
    """Whose RuntimeClass this is beside kata-deploy's, which has the handler's name."""
    if name == handler:
        return (
            f"Named as its handler {handler}, as kata-deploy names its own RuntimeClass: "
            "applying this replaces that one."
        )
    return (
        f"Pods name it (runtimeClassName: {name}); it runs the handler {handler} and leaves "
        f"the RuntimeClass {handler} (kata-deploy's) as it is."
    )


def explanation(
    o: RuntimeClassOverhead, config: str, hypervisor: str, name: str, handler: str, cpu_policy: str
) -> list[str]:
    """The arithmetic, one line each (the YAML's comments)."""
    lines = [
        f"RuntimeClass for Kata with {hypervisor}: kata-mem runtimeclass --config {config}",
        f"sizing {o.sizing}, pods with memory limits up to {fmt_limits(o.max_pod_memory)} "
        f"({o.max_pod_memory_from}).",
        _naming(name, handler),
        "",
        "podFixed.memory: the kubelet limits a pod's cgroup to its memory limits + podFixed,",
        "and kata-mem's host-side guard lets the VM grow only while",
        f"  VM + VMM overhead ({fmt_bytes(o.vmm_fixed)} + {fmt_bytes(o.vmm_per_gib)}/GiB of VM) "
        f"+ margin {fmt_bytes(o.margin)} <= that limit (in whole pages).",
        _vm_rule(o) + ".",
        f"The pod that needs the most: {_pod(o.binding)}.",
        f"The smallest pod: {_pod(o.smallest)}.",
        f"The largest pod: {_pod(o.largest)}.",
        f"podFixed.memory = {to_mib_ceil(o.memory)}Mi (rounded up to MiB); larger pods are "
        "clamped by the guard.",
        "The VMM overhead must also cover what else runs in the pod cgroup (the shim, virtiofsd):",
        "raise [kata_mem] vmm_overhead_mib when it does not.",
        "",
    ]
    lines += _cpu_lines(o, cpu_policy)
    return lines


def _cpu_lines(o: RuntimeClassOverhead, policy: str) -> list[str]:
    default = format_float32(o.default_vcpus or Fraction(1))  # a float32, as Kata prints it
    vcpus = f"Kata boots ceil(default_vcpus {default} + CPU limits) vCPUs"
    every = (
        "unknown here (default_vcpus is negative: the node's CPUs)"
        if o.cpu_millis is None
        else _cpu(o.cpu_millis)
    )
    if policy == "none":
        return [
            "podFixed.cpu: left out (--cpu-policy none): the scheduler reserves the pod's CPU",
            "requests alone, and QEMU's own threads share the pod's CFS quota with the vCPUs.",
        ]
    if policy == "all-vcpus":
        if o.cpu_millis is None:
            return [f"podFixed.cpu: left out (--cpu-policy all-vcpus): {every}."]
        return [
            f"podFixed.cpu (--cpu-policy all-vcpus): {vcpus} and the pod's CFS",
            f"quota is the CPU limits + podFixed.cpu: {every} lets every vCPU run at once",
            "(limits just above a whole CPU need the most), and the scheduler reserves it per pod.",
        ]
    return [
        f"podFixed.cpu (--cpu-policy kata, the default): {_cpu(KATA_POD_FIXED_CPU_MILLIS)}, "
        "kata-deploy's own: the scheduler",
        "reserves it per pod for QEMU's and the shim's threads. CPU beyond the pod's CFS quota",
        "is throttled, never killed (memory is what kills): the vCPUs above the CPU limits",
        f"share the quota. {vcpus}; all of them at once",
        f"would need {every} (--cpu-policy all-vcpus), reserved on the scheduler for every pod.",
    ]


def runtimeclass_yaml(
    o: RuntimeClassOverhead, config: str, hypervisor: str, name: str, handler: str, cpu_policy: str
) -> str:
    lines = explanation(o, config, hypervisor, name, handler, cpu_policy)
    comments = "".join(f"# {line}".rstrip() + "\n" for line in lines)
    body = yaml.safe_dump(
        manifest(o, name, handler, cpu_policy), sort_keys=False, default_flow_style=False
    )
    return comments + body


def _fit_json(f: PodFit) -> dict[str, int]:
    return {
        "limits_bytes": f.limits,
        "vm_bytes": f.vm,
        "asked_bytes": f.asked,
        "vmm_overhead_bytes": f.vmm_overhead,
        "margin_bytes": f.margin,
        "cgroup_bytes": f.needed,
        "pod_fixed_bytes": f.pod_fixed,
    }


def runtimeclass_json(
    o: RuntimeClassOverhead, config: str, hypervisor: str, name: str, handler: str, cpu_policy: str
) -> dict[str, Any]:
    return {
        "schema": "kata-mem/runtimeclass/v1",
        "runtimeclass": manifest(o, name, handler, cpu_policy),
        "config": config,
        "sizing": o.sizing,
        "max_pod_memory_bytes": o.max_pod_memory,
        "max_pod_memory_from": o.max_pod_memory_from,
        "pod_fixed_memory_bytes": o.memory,
        "pod_fixed_cpu_millis": pod_fixed_cpu(o, cpu_policy),
        "cpu_policy": cpu_policy,
        "all_vcpus_cpu_millis": o.cpu_millis,
        "mechanism": o.mechanism,
        "static_sandbox_resource_mgmt": o.static,
        "block_bytes": o.block,
        "boot_bytes": o.boot,
        "default_maxmemory_bytes": o.maximum,
        "vmm_overhead_bytes": o.vmm_fixed,
        "vmm_overhead_per_gib_bytes": o.vmm_per_gib,
        "pods": {
            "binding": _fit_json(o.binding),
            "smallest": _fit_json(o.smallest),
            "largest": _fit_json(o.largest),
        },
        "explanation": [
            line for line in explanation(o, config, hypervisor, name, handler, cpu_policy) if line
        ],
    }


def class_name(name: str, bound_text: str) -> str:
    """The RuntimeClass of a size class: ``NAME-BOUND``, the bound as typed, lowercased
    (``kata-mem-qemu-2gi``)."""
    return f"{name}-{bound_text.lower()}"


def classes_header(
    classes: list[tuple[str, RuntimeClassOverhead]], config: str, hypervisor: str
) -> list[str]:
    """The split's arithmetic: what each class reserves per pod against one class for all."""
    top = to_mib_ceil(classes[-1][1].memory)
    width = max(len(n) for n, _ in classes)
    lines = [
        f"Size classes for Kata with {hypervisor}: kata-mem runtimeclass --config {config}",
        "The scheduler reserves a RuntimeClass's podFixed for every pod that names it, and",
        "podFixed.memory grows with the largest pod a class covers (the VM and QEMU's overhead",
        f"per GiB of VM). One class for every pod up to {fmt_limits(classes[-1][1].max_pod_memory)} "
        f"would reserve {top}Mi on each; by class:",
    ]
    for name, o in classes:
        mib = to_mib_ceil(o.memory)
        saved = f", {top - mib}Mi less a pod" if mib < top else ""
        lines.append(
            f"  {name:<{width}}  pods with memory limits up to {fmt_limits(o.max_pod_memory)}: "
            f"podFixed.memory {mib}Mi{saved}"
        )
    lines += [
        "A pod names the smallest class that holds its memory limits (runtimeClassName); one",
        "above its class's bound is held to its pod cgroup by the guard (clamped, never",
        "OOM-killed). Every class runs the same handler.",
        "",
    ]
    return lines
