"""What the host side says about one sandbox, read just before it is planned: the
VMM's memory cgroup and the node's total (docs, "Host-side guards").

The cgroup is the one given (``--host-cgroup``, a request's ``host.cgroup``), else
the one the VMM's process is in (the backend reports its pid: ``SO_PEERCRED`` on
the QMP socket, libvirt's pid file), with libvirt's ``<memtune><hard_limit>`` as
one more limit. A cgroup kata-mem looked for and cannot see is :class:`Unseen` (the
planner holds the grow, docs "Host-side guards"); one the user named and kata-mem
cannot read is an input error. The
node's total comes from the state directory, under the node-wide admission lock
(:func:`kata_mem.edges.ledger.node_admission`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from kata_mem.core.errors import InputError
from kata_mem.core.model import (
    CgroupLevel,
    GuardMode,
    Guards,
    HostCgroup,
    HostFacts,
    NodeView,
    Note,
    Origin,
    Settings,
    SizingConfig,
    Unseen,
    VmState,
)
from kata_mem.core.units import MiB, align_down, fmt_bytes
from kata_mem.core.values import Frozen, replace

#: Where a cgroup given by hand came from, unless the caller says.
_HOST_CGROUP_OPTION = Origin("option", "--host-cgroup")

#: The limit libvirt's ``<memtune><hard_limit>`` sets, named as a cgroup level.
HARD_LIMIT = "libvirt <memtune><hard_limit>"


def read_cgroup(
    vm: VmState, given: Optional[str], origin: Origin, mode: GuardMode = "on"
) -> tuple[Optional[HostCgroup], Optional[Unseen], tuple[Note, ...]]:
    """The VMM's cgroup, or why it could not be seen, and notes: from ``given`` (a
    directory the user named; ``origin`` says where) or from the VMM's pid.

    ``mode`` ``off`` (``host_cgroup_guard``): the VMM's cgroup is not looked for, and
    only a cgroup named by hand is read. A VMM whose cgroup cannot be found or read is
    :class:`Unseen`, never "no limit" (a QEMU in no limited cgroup is a cgroup without
    levels); one where no host process runs the VM (the fake backend) has none.

    :raises InputError: ``given`` is not a readable memory cgroup directory.
    """
    from kata_mem.edges.cgroups import CgroupUnreadable, cgroup_of_dir, cgroup_of_pid

    found: Optional[HostCgroup] = None
    hard = vm.vmm_hard_limit
    try:
        if given:
            found = cgroup_of_dir(given, origin.name())
        elif mode == "off":
            return None, None, ()
        elif vm.vmm_pid is not None:
            found = cgroup_of_pid(vm.vmm_pid)
        elif vm.vmm_pid_hidden:
            raise CgroupUnreadable(
                "the backend could not tell QEMU's pid (its QMP peer is in another pid "
                "namespace: run kata-mem in the host's, hostPID: true), so its cgroup cannot "
                "be found",
                "vmm_pid_unknown",
            )
    except CgroupUnreadable as exc:
        if given:  # the message names ``origin`` and ``given`` already
            raise InputError(exc.message) from exc
        detail = exc.message
        if hard is not None:
            detail += f"; {HARD_LIMIT} is {fmt_bytes(hard)}"
        return None, Unseen(exc.reason, detail), ()
    if found is not None and hard is not None:
        level = CgroupLevel(HARD_LIMIT, hard, found.usage)
        found = replace(found, levels=(level, *found.levels))
    elif found is None and hard is not None:
        # libvirt set a limit on a QEMU whose pid it did not give: its cgroup is unseen.
        return (
            None,
            Unseen(
                "vmm_pid_unknown",
                f"{HARD_LIMIT} is {fmt_bytes(hard)} but "
                "QEMU's pid (and so its cgroup) was not found",
            ),
            (),
        )
    if found is not None and found.unread_usage:
        return (
            found,
            None,
            (
                Note(
                    "host_cgroup",
                    f"host cgroup usage unknown: {'; '.join(found.unread_usage)}; the guard counts "
                    "only the VMM overhead model there, not what else is charged",
                ),
            ),
        )
    return found, None, ()


def node_budget(settings: Settings, host: HostFacts) -> Optional[int]:
    """``(host - node_reserved) * node_overcommit``, floored to whole MiB (as every size
    a plan sets is); ``None`` when ``node_overcommit`` is not set (the node's total is
    then reported only)."""
    if settings.node_overcommit is None:
        return None
    budget = int((host.memory - settings.node_reserved) * settings.node_overcommit)
    return max(align_down(budget, MiB), 0)


#: How the new pod limit's level is named when the VMM's cgroup is not known.
POD_CGROUP = "the pod cgroup"


def pod_level(cgroup: Optional[HostCgroup], limit: int) -> CgroupLevel:
    """The level the kubelet's new pod limit will be written to, with what it is charged:
    the innermost limited cgroup above the VMM (the pod cgroup: the kubelet limits it,
    while Kata's own sandbox cgroup below it, with ``sandbox_cgroup_only``, has no limit
    of its own), else the VMM's cgroup itself (a pod that had no limit), else unnamed
    (its charge unknown: only the VMM overhead model counts)."""
    if cgroup is None:
        return CgroupLevel(POD_CGROUP, limit)
    inner = next((lvl for lvl in cgroup.levels if lvl.path != HARD_LIMIT), None)
    if inner is not None:
        return CgroupLevel(inner.path, limit, inner.usage)
    return CgroupLevel(cgroup.path, limit, cgroup.usage)


class HostSide(Frozen):
    """Reads the guards for one sandbox (:meth:`read`) and QEMU's charge after the
    steps (:meth:`charge`). ``pod_limit`` is the pod cgroup limit the kubelet is about
    to set (an ``update-sandbox`` request), ``None`` for none."""

    cfg: SizingConfig
    host: HostFacts
    given_cgroup: Optional[str] = None
    given_origin: Origin = _HOST_CGROUP_OPTION
    pod_limit: Optional[int] = None

    def read(
        self,
        vm: VmState,
        committed_others: Optional[Callable[[], int]] = None,
        available: Callable[[], Optional[int]] = lambda: None,
    ) -> Guards:
        """The guards for ``vm``; with ``committed_others`` (what the other sandboxes hold)
        the node's view too, with the host's MemAvailable from ``available``.

        :raises InputError: the given cgroup is unreadable."""
        mode = self.cfg.settings.host_cgroup_guard
        cgroup, unseen, notes = read_cgroup(vm, self.given_cgroup, self.given_origin, mode)
        node = None
        if committed_others is not None:
            budget = node_budget(self.cfg.settings, self.host)
            node = NodeView(
                host=self.host.memory,
                reserved=self.cfg.settings.node_reserved,
                budget=budget,
                # Read (a few files per sandbox) only when a budget needs them.
                committed_others=None if budget is None else committed_others(),
                available=available(),
            )
        pod = None if self.pod_limit is None else pod_level(cgroup, self.pod_limit)
        return Guards(
            cgroup=cgroup,
            unseen=unseen,
            off=mode == "off" and not self.given_cgroup,
            notes=notes,
            node=node,
            pod_limit=pod,
        )

    def charge_at(self, cgroup: Optional[HostCgroup], level: str) -> Optional[int]:
        """What the cgroup level ``level`` (a directory of ``cgroup``'s path) is charged
        now; ``None`` when unknown or unreadable."""
        from kata_mem.edges.cgroups import CgroupUnreadable, cgroup_of_dir

        if cgroup is None or not cgroup.path:
            return None
        try:
            now = cgroup_of_dir(cgroup.path, cgroup.origin)
        except CgroupUnreadable:
            return None
        if level == now.path:
            return now.usage
        return next((lvl.usage for lvl in now.levels if lvl.path == level), None)

    def charge(self, cgroup: HostCgroup) -> Optional[int]:
        """What the VMM's cgroup is charged now (``None`` when unreadable)."""
        from kata_mem.edges.cgroups import CgroupUnreadable, cgroup_of_dir

        if not cgroup.path:
            return None
        try:
            return cgroup_of_dir(cgroup.path, cgroup.origin).usage
        except CgroupUnreadable:
            return None
