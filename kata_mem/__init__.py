"""kata-mem: size and resize the guest memory of Kata-style VM sandboxes.

The public API is what ``__all__`` lists: :func:`handle` (one request, the way every
interface serves it), :func:`plan` (the pure planner), the configuration and host
readers, the values and the error tree. The layer packages under ``kata_mem``
(``core``, ``edges``, ``backends``, ``orchestration``, ``interfaces``) are internal.
No name of the API is also a module of this package, so importing any module never
changes what a name means. Names are imported on first use (PEP 562), so that
``kata-mem shim`` loads only what a request needs.
"""

from __future__ import annotations

# Not typing's: importing typing is a tenth of what kata-mem-shim's whole path costs
# (kata_mem.interfaces.shim_client), and type checkers know this spelling too.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_EXPORTS = {
    "handle": "kata_mem.orchestration.handle:handle",
    "plan": "kata_mem.core.plan:plan",
    "load_config": "kata_mem.edges.config:load_config",
    "find_config": "kata_mem.edges.config:find_config",
    "probe_host": "kata_mem.edges.host:probe_host",
    "parse_quantity": "kata_mem.core.quantity:parse_quantity",
    "quantity_bytes": "kata_mem.core.quantity:quantity_bytes",
    "replace": "kata_mem.core.frozen:replace",
    **{
        name: "kata_mem.core.request:" + name
        for name in ("CallOptions", "HostOverrides", "SandboxRequest")
    },
    "Endpoint": "kata_mem.core.endpoint:Endpoint",
    **{
        name: "kata_mem.core.sandbox_resources:" + name
        for name in ("SandboxResize", "SandboxResources")
    },
    **{
        name: "kata_mem.core.results:" + name
        for name in ("Applied", "Forgotten", "Planned", "Response")
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
            "Clamp", "Container", "GuestUsage", "HostFacts", "MemoryDevice", "MemoryPlan", "Note", "Origin", "Outcome", "Plan",
            "SandboxSizing", "Settings", "SizingConfig", "Step", "VcpuPlan", "VmState", "Workload",
        )
    },
}  # fmt: skip

__all__ = [
    "Applied",
    "BackendError",
    "BackendUnavailable",
    "BackendUnsupported",
    "CallOptions",
    "Clamp",
    "ConfigError",
    "Container",
    "Endpoint",
    "Forgotten",
    "GuestUsage",
    "HostFacts",
    "HostOverrides",
    "InputError",
    "KataMemError",
    "MemoryDevice",
    "MemoryPlan",
    "MissingDependency",
    "Note",
    "Origin",
    "Outcome",
    "Plan",
    "Planned",
    "QuantityError",
    "Response",
    "SandboxRequest",
    "SandboxResize",
    "SandboxResources",
    "SandboxSizing",
    "Settings",
    "SizingConfig",
    "Step",
    "VcpuPlan",
    "VmState",
    "Workload",
    "__version__",
    "find_config",
    "handle",
    "load_config",
    "parse_quantity",
    "plan",
    "probe_host",
    "quantity_bytes",
    "replace",
]


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'kata_mem' has no attribute {name!r}")
    from importlib import import_module

    module, _, attr = target.partition(":")
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from kata_mem.core.endpoint import Endpoint
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
    from kata_mem.core.frozen import replace
    from kata_mem.core.model import (
        Clamp,
        Container,
        GuestUsage,
        HostFacts,
        MemoryDevice,
        MemoryPlan,
        Note,
        Origin,
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
    from kata_mem.core.plan import plan
    from kata_mem.core.quantity import parse_quantity, quantity_bytes
    from kata_mem.core.request import CallOptions, HostOverrides, SandboxRequest
    from kata_mem.core.results import Applied, Forgotten, Planned, Response
    from kata_mem.core.sandbox_resources import SandboxResize, SandboxResources
    from kata_mem.edges.config import find_config, load_config
    from kata_mem.edges.host import probe_host
    from kata_mem.orchestration.handle import handle
