"""A pod's new resources (CRI ``UpdatePodSandboxResources``), as a shim request's
``sandbox_resources`` and ``overhead`` carry them, and the workload they size the
sandbox from. Pure.

:mod:`kata_mem.core.podresize` is the runtime's answer to such a resize.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, Optional

from kata_mem.core.fields import REQUEST
from kata_mem.core.model import SandboxSizing, Workload
from kata_mem.core.units import INT64_MAX, INT64_MIN
from kata_mem.core.values import Frozen, field

#: What the sandbox's resources are read as, in errors and notes.
RESOURCES_ORIGIN = "request sandbox_resources"
OVERHEAD_ORIGIN = "request overhead.memory_limit_bytes"


class SandboxResources(Frozen):
    """The parts of a CRI ``LinuxContainerResources`` that size a sandbox, as
    ``UpdatePodSandboxResourcesRequest`` carries them in ``resources`` and ``overhead``
    (kubernetes/cri-api pkg/apis/runtime/v1/api.proto): the memory limit in bytes (0 or
    negative: none, as the kubelet sends a pod without one) and the CFS quota and period.
    """

    memory_limit: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0

    @property
    def memory(self) -> int:
        """The memory limit, 0 for none."""
        return max(self.memory_limit, 0)

    @property
    def cpu(self) -> Fraction:
        """CPUs as quota/period (0 without a positive quota and period: -1 is unlimited)."""
        if self.cpu_quota > 0 and self.cpu_period > 0:
            return Fraction(self.cpu_quota, self.cpu_period)
        return Fraction(0)

    def to_json(self) -> dict[str, int]:
        return {
            "memory_limit_bytes": self.memory_limit,
            "cpu_quota": self.cpu_quota,
            "cpu_period": self.cpu_period,
        }

    @classmethod
    def from_json(
        cls, doc: dict[str, Any], at: str, memory_minimum: int = INT64_MIN
    ) -> SandboxResources:
        """:raises InputError: an unknown field, or one that is not an integer in range."""
        REQUEST.only(doc, ("memory_limit_bytes", "cpu_quota", "cpu_period"), at)
        return cls(
            REQUEST.integer(doc, "memory_limit_bytes", at, minimum=memory_minimum) or 0,
            REQUEST.integer(doc, "cpu_quota", at) or 0,
            REQUEST.integer(doc, "cpu_period", at, minimum=0) or 0,
        )


class SandboxResize(Frozen):
    """A pod's new resources, as the kubelet sends them before it writes the pod cgroup
    (``UpdatePodSandboxResources``, kubernetes PR #137555): ``resources`` is the pod
    cgroup's configuration less the RuntimeClass ``overhead`` (kubelet
    ``generateUpdatePodSandboxResourcesRequest``, pkg/kubelet/kuberuntime)."""

    resources: SandboxResources
    overhead: SandboxResources = field(default_factory=SandboxResources)

    @property
    def pod_limit(self) -> Optional[int]:
        """The pod cgroup's memory limit the kubelet is about to set: resources plus
        overhead (``subtractOverheadFromResourceConfig`` took the overhead out); ``None``
        when the pod has none."""
        if self.resources.memory == 0:
            return None
        return min(self.resources.memory + self.overhead.memory, INT64_MAX)

    def workload(self, hypervisor: tuple[tuple[str, str], ...] = ()) -> Workload:
        """What the sandbox is sized from: the new resources, the sum of the containers'
        limits as the kubelet sees the pod (on a grow the containers are updated only
        after the pod cgroup, so their limits would be the old ones), and the overhead;
        with the pod's Kata hypervisor annotations ``hypervisor``, which choose its
        configuration as at boot."""
        overhead = self.overhead.memory or None
        return Workload(
            (),
            SandboxSizing(
                self.resources.memory,
                self.resources.cpu,
                RESOURCES_ORIGIN,
                source="the pod's new resources (CRI UpdatePodSandboxResources)",
            ),
            overhead,
            OVERHEAD_ORIGIN if overhead is not None else "",
            hypervisor=hypervisor,
            hypervisor_origin="request annotations" if hypervisor else "",
        )
