"""kata-mem: size and resize the guest memory of Kata-style VM sandboxes.

The public API is what ``__all__`` lists; every other module is internal.
"""

from __future__ import annotations

import logging

from kata_mem.config import find_config, load_config
from kata_mem.errors import (
    BackendError,
    BackendUnavailable,
    BackendUnsupported,
    ConfigError,
    GuestTimeout,
    InputError,
    KataMemError,
    PlanRejected,
    QuantityError,
)
from kata_mem.host import probe_host
from kata_mem.model import (
    Clamp,
    Container,
    HostFacts,
    MemoryDevice,
    MemoryPlan,
    Plan,
    SandboxRequest,
    SandboxSizing,
    Settings,
    SizingConfig,
    Step,
    VcpuPlan,
    VmState,
)
from kata_mem.planner import plan
from kata_mem.quantity import parse_quantity, quantity_bytes

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "BackendUnsupported",
    "Clamp",
    "ConfigError",
    "Container",
    "GuestTimeout",
    "HostFacts",
    "InputError",
    "KataMemError",
    "MemoryDevice",
    "MemoryPlan",
    "Plan",
    "PlanRejected",
    "QuantityError",
    "SandboxRequest",
    "SandboxSizing",
    "Settings",
    "SizingConfig",
    "Step",
    "VcpuPlan",
    "VmState",
    "__version__",
    "find_config",
    "load_config",
    "parse_quantity",
    "plan",
    "probe_host",
    "quantity_bytes",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
