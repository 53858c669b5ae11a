"""kata-mem: size and resize the guest memory of Kata-style VM sandboxes.

The public API is what ``__all__`` lists; every other module is internal. Names
are imported on first use (PEP 562), so that ``kata-mem shim`` loads only what
a request needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS = {
    "apply": "kata_mem.orchestration.apply:apply_request",
    "serve": "kata_mem.orchestration.apply:serve",
    "Response": "kata_mem.orchestration.apply:Response",
    "plan": "kata_mem.core.planner:plan",
    "load_config": "kata_mem.edges.config:load_config",
    "find_config": "kata_mem.edges.config:find_config",
    "probe_host": "kata_mem.edges.host:probe_host",
    "parse_quantity": "kata_mem.core.quantity:parse_quantity",
    "quantity_bytes": "kata_mem.core.quantity:quantity_bytes",
    **{
        name: "kata_mem.core.request:" + name
        for name in ("Endpoint", "HostOverrides", "SandboxRequest")
    },
    **{
        name: "kata_mem.core.errors:" + name
        for name in (
            "KataMemError", "ConfigError", "InputError", "QuantityError",
            "BackendUnavailable", "BackendError", "BackendUnsupported", "MissingDependency",
        )
    },
    **{
        name: "kata_mem.core.model:" + name
        for name in (
            "Clamp", "Container", "GuestUsage", "HostFacts", "MemoryDevice", "MemoryPlan", "Outcome", "Plan",
            "SandboxSizing", "Settings", "SizingConfig", "Step", "VcpuPlan", "VmState", "Workload",
        )
    },
}  # fmt: skip

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "BackendUnsupported",
    "Clamp",
    "ConfigError",
    "Container",
    "Endpoint",
    "GuestUsage",
    "HostFacts",
    "HostOverrides",
    "InputError",
    "KataMemError",
    "MemoryDevice",
    "MemoryPlan",
    "MissingDependency",
    "Outcome",
    "Plan",
    "QuantityError",
    "Response",
    "SandboxRequest",
    "SandboxSizing",
    "Settings",
    "SizingConfig",
    "Step",
    "VcpuPlan",
    "VmState",
    "Workload",
    "__version__",
    "apply",
    "find_config",
    "load_config",
    "parse_quantity",
    "plan",
    "probe_host",
    "quantity_bytes",
    "serve",
]


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'kata_mem' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from kata_mem.core.errors import (
        BackendError,
        BackendUnavailable,
        BackendUnsupported,
        ConfigError,
        InputError,
        KataMemError,
        MissingDependency,
        QuantityError,
    )
    from kata_mem.core.model import (
        Clamp,
        Container,
        GuestUsage,
        HostFacts,
        MemoryDevice,
        MemoryPlan,
        Outcome,
        Plan,
        SandboxSizing,
        Settings,
        SizingConfig,
        Step,
        VcpuPlan,
        VmState,
        Workload,
    )
    from kata_mem.core.planner import plan
    from kata_mem.core.quantity import parse_quantity, quantity_bytes
    from kata_mem.core.request import Endpoint, HostOverrides, SandboxRequest
    from kata_mem.edges.config import find_config, load_config
    from kata_mem.edges.host import probe_host
    from kata_mem.orchestration.apply import Response, serve
    from kata_mem.orchestration.apply import apply_request as apply
