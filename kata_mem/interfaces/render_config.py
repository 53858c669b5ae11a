"""Host facts (``kata-mem host``) and configurations (``kata-mem config check``) as JSON
documents and as text.

The JSON shapes are the stable, documented interface (docs, "JSON output");
the text forms are for reading and may change.
"""

from __future__ import annotations

from typing import Any

from kata_mem.core.backing import dimm_backend
from kata_mem.core.golang import format_float32
from kata_mem.core.model import HostFacts, SizingConfig
from kata_mem.core.units import to_kib_floor, to_mib_floor

HOST_SCHEMA = "kata-mem/host/v1"
CONFIG_SCHEMA = "kata-mem/config/v1"


def host_json(host: HostFacts) -> dict[str, Any]:
    return {
        "schema": HOST_SCHEMA,
        "memory_mib": to_mib_floor(host.memory),
        "cpus": host.cpus,
        "arch": host.arch,
        "hugepage_size_kib": to_kib_floor(host.hugepage_size),
        "hugepages_total": host.hugepages_total,
        "hugepages_free": host.hugepages_free,
        "cgroup_path": host.cgroup_path or None,
        "cgroup_memory_limit_mib": None
        if host.cgroup_memory_limit is None
        else to_mib_floor(host.cgroup_memory_limit),
        "sources": {key: origin.describe() for key, origin in host.sources},
    }


def host_text(host: HostFacts) -> str:
    d = host_json(host)
    lines = [
        f"memory   {d['memory_mib']} MiB",
        f"cpus     {d['cpus']}",
        f"arch     {d['arch']}",
        f"hugepages {d['hugepages_total']} x {d['hugepage_size_kib']} KiB "
        f"({d['hugepages_free']} free)",
    ]
    if host.cgroup_path:
        limit = d["cgroup_memory_limit_mib"]
        lines.append(
            f"cgroup   {host.cgroup_path}: {'unlimited' if limit is None else f'{limit} MiB'}"
        )
    lines += [f"  {k}: {origin.describe()}" for k, origin in host.sources]
    return "\n".join(lines)


def memory_owner(cfg: SizingConfig) -> str:
    """Who resizes a VM of this configuration after boot (docs/guide/kubernetes.md, "One
    owner of each VM's memory"). Kata's runtimes hotplug by themselves on container create,
    start and update unless ``static_sandbox_resource_mgmt`` is set: the Go runtime's
    ``Sandbox.updateResources`` (src/runtime/virtcontainers/sandbox.go, called from
    ``CreateContainer``, ``StartContainer`` and container.go's ``update``) returns early
    on ``StaticResourceMgmt``, as runtime-rs's ``update_linux_resource``
    (src/runtime-rs/crates/resource/src/manager_inner.rs) skips its hotplug; so with it set
    the VM keeps its boot size unless kata-mem resizes it. ``sandbox_cgroup_only`` changes
    where QEMU is charged, not who resizes."""
    if cfg.static_sandbox_resource_mgmt:
        return (
            "sized once at boot by Kata, which never resizes it (static_sandbox_resource_mgmt "
            "= true): kata-mem is its one owner after boot, and resizes it through its hotplug "
            "region to the size Kata boots the workload with"
        )
    return (
        "Kata's runtime hotplugs it by itself on container create, start and update "
        "(static_sandbox_resource_mgmt = false): let kata-mem apply (or serve) resize it only "
        "from a shim that calls kata-mem in place of that hotplug, never beside it"
    )


def config_json(cfg: SizingConfig, chosen_by: str) -> dict[str, Any]:
    s = cfg.settings
    # Only QEMU takes DIMMs from kata-mem (over QMP or libvirt), so only its rule is shown.
    dimm = dimm_backend(cfg) if cfg.hypervisor == "qemu" else None
    return {
        "schema": CONFIG_SCHEMA,
        "path": cfg.path,
        "chosen_by": chosen_by,
        "files": list(cfg.files),
        "hypervisor": cfg.hypervisor,
        "memory_owner": memory_owner(cfg),
        "dimm_backend": None
        if dimm is None
        else {
            "qom_type": dimm.qom_type,
            "mem_path": dimm.mem_path or None,
            "share": dimm.share,
            "why": dimm.why,
        },
        "effective": {
            "default_memory_mib": to_mib_floor(cfg.default_memory),
            "default_maxmemory_mib": to_mib_floor(cfg.default_maxmemory),
            "memory_slots": cfg.memory_slots,
            "memory_offset_mib": to_mib_floor(cfg.memory_offset),
            "enable_virtio_mem": cfg.enable_virtio_mem,
            "enable_hugepages": cfg.enable_hugepages,
            "static_sandbox_resource_mgmt": cfg.static_sandbox_resource_mgmt,
            # The float32 Kata holds, as Go's encoding/json writes one.
            "default_vcpus": float(format_float32(cfg.default_vcpus)),
            "default_maxvcpus": cfg.default_maxvcpus,
            "runtime": cfg.runtime,
            "shared_fs": cfg.shared_fs,
        },
        "kata_mem": {
            "dimm_block_mib": to_mib_floor(s.dimm_block),
            "virtio_mem_block_mib": to_mib_floor(s.virtio_mem_block),
            "headroom_min_mib": to_mib_floor(s.headroom_min),
            "headroom_percent": s.headroom_percent,
            "shrink_step_min_mib": to_mib_floor(s.shrink_step_min),
            "shrink_step_percent": s.shrink_step_percent,
            "step_timeout_s": s.step_timeout_s,
            "usage_max_age_s": s.usage_max_age_s,
            "stats_interval_s": s.stats_interval_s,
            "allow_shrink": s.allow_shrink,
            "state_dir": s.state_dir,
            "host_memory_cgroup": s.host_memory_cgroup,
            "hugepages_path": s.hugepages_path,
            "sizing": s.sizing,
            "pod_overhead_mib": None if s.pod_overhead is None else to_mib_floor(s.pod_overhead),
            "vmm_overhead_mib": to_mib_floor(s.vmm_overhead),
            "vmm_overhead_per_gib_mib": to_mib_floor(s.vmm_overhead_per_gib),
            "host_cgroup_margin_mib": to_mib_floor(s.host_cgroup_margin),
            "host_cgroup_guard": s.host_cgroup_guard,
            "node_reserved_mib": to_mib_floor(s.node_reserved),
            "node_overcommit": None if s.node_overcommit is None else float(s.node_overcommit),
            "runtime": s.runtime,
            "guest_onlining": s.guest_onlining,
            "guest_memmap_on_memory": s.guest_memmap_on_memory,
        },
        "sources": {key: origin.describe() for key, origin in cfg.sources},
    }


def config_text(cfg: SizingConfig, chosen_by: str) -> str:
    d = config_json(cfg, chosen_by)
    lines = [
        f"{cfg.path} (chosen by {chosen_by}); files read: {', '.join(cfg.files)}",
        "effective values:",
    ]
    src = {key: origin.describe() for key, origin in cfg.sources}
    for key, value in d["effective"].items():
        base = key.removesuffix("_mib")
        section = (
            "runtime" if base == "static_sandbox_resource_mgmt" else f"hypervisor.{cfg.hypervisor}"
        )
        origin = src.get("runtime" if key == "runtime" else f"{section}.{base}", "?")
        lines.append(f"  {key:<30} {_text(value):<10} <- {origin}")
    lines.append(f"memory after boot: {d['memory_owner']}")
    if cfg.hypervisor == "qemu":
        dimm = dimm_backend(cfg)
        lines.append(f"a hot-added DIMM's memory: {dimm.describe()} ({dimm.why})")
    lines.append("kata-mem settings ([kata_mem]):")
    for key, value in d["kata_mem"].items():
        shown = _UNSET.get(key, "unset") if value in (None, "") else _text(value)
        lines.append(f"  {key:<30} {shown:<10} <- {src.get(f'kata_mem.{key}', '?')}")
    return "\n".join(lines)


#: What a setting left out (or "") means, for config check's text (docs, the table).
_UNSET = {
    "host_memory_cgroup": '"" (none: host memory is MemTotal alone)',
    "pod_overhead_mib": "unset (only the Pod or its annotation gives a pod overhead)",
    "node_overcommit": "unset (the node's total is reported, never enforced)",
    "runtime": "unset (inferred from the configuration)",
}


def _text(value: object) -> str:
    """A value as the TOML file spells it (true/false, not Python's True/False)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)
