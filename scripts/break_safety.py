#!/usr/bin/env python3
"""Break the rules on purpose (sizing, shrink safety, the node install) and see the tests notice.

Each break is one small textual change to a copy of the package (the tree itself is
never touched): an off-by-one, a flipped comparison, a dropped term, a wrong field, in
the shrink-safety rule, the usage readings it is judged on, the outcomes, the planner's
clamps and the journal's record; and the node install's rule that it touches only what
it wrote (scripts/install-node.sh). For each, the test modules that guard the broken
module (``GUARDS``; with ``--full`` the whole fast suite: everything but the real-guest
and libvirt tests) run against the copy, stopping at the first failure; a break's
``first`` tests, the guards' tests that kill it, run on their own before them, so that a
break in a slow module is not found late. A break that no test fails "survives": the suite
does not guard that part of the rule. A control run
with no break runs the same tests first and must pass. Exit status 1 if any break
survives or no longer applies.

    scripts/break_safety.py [--only NAME] [--full] [--list] [--no-control]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST = ["-m", "not guest and not libvirt"]
#: The whole fast suite (--full), unit tests first: a killed break is usually found in seconds.
ORDER = ("tests/unit", "tests/property", "tests/cli", "tests/integration", "tests/service")

_SAFETY = (
    "tests/unit/test_safety_cases.py",
    "tests/unit/test_safety_executor.py",
    "tests/unit/test_executor.py",
)
#: The planner's tests, which guard every stage of kata_mem/core/plan.
_PLANNER = (
    "tests/unit/test_plan_cases.py",
    "tests/unit/test_executor.py",
    "tests/unit/test_fidelity.py",
    "tests/property/test_planner_properties.py",
    "tests/property/test_alignment_properties.py",
    "tests/property/test_guard_properties.py",
    "tests/unit/test_guest_ceiling.py",
    "tests/property/test_guest_ceiling_properties.py",
    "tests/unit/test_kata_cases.py",
)
#: The test modules that guard each module's rules, the table-driven ones first. A break
#: in a module runs these; a break that survives them is a missing test here, whatever
#: the rest of the suite would say.
GUARDS: dict[str, tuple[str, ...]] = {
    "kata_mem/core/safety.py": _SAFETY,
    "kata_mem/core/model.py": _SAFETY,
    "kata_mem/orchestration/usage.py": ("tests/unit/test_usage.py", *_SAFETY[1:]),
    "kata_mem/core/outcomes.py": (
        "tests/unit/test_outcome_cases.py",
        "tests/unit/test_record.py",
        "tests/unit/test_executor.py",
    ),
    **dict.fromkeys(
        (
            f"kata_mem/core/plan/{stage}.py"
            for stage in ("workload", "geometry", "guards", "steps", "memory", "vcpus")
        ),
        _PLANNER,
    ),
    "kata_mem/core/guestmem.py": (
        "tests/unit/test_kernel_params.py",
        "tests/unit/test_outcome_cases.py",
        "tests/unit/test_plan_cases.py",
        "tests/unit/test_guest_ceiling.py",
        "tests/property/test_guest_ceiling_properties.py",
        "tests/unit/test_grow_confirmation.py",
    ),
    "kata_mem/orchestration/executor.py": (
        "tests/unit/test_grow_confirmation.py",
        "tests/unit/test_executor.py",
        "tests/unit/test_ledger.py",
    ),
    "kata_mem/edges/cgroups.py": ("tests/unit/test_cgroups.py", "tests/unit/test_host_side.py"),
    "kata_mem/core/endpoint.py": ("tests/unit/test_values.py", "tests/unit/test_request.py"),
    "kata_mem/core/request.py": ("tests/unit/test_values.py", "tests/unit/test_request.py"),
    # The reconcile loop's guarantees (docs/design/state.md): what the kernel reports is
    # read and acted on, what it cannot watch is asked at every interval, and an entry
    # another user could have written is refused, not shown.
    "kata_mem/interfaces/node_view.py": (
        "tests/unit/test_node_view.py",
        "tests/service/test_reconcile_loop.py",
    ),
    "kata_mem/interfaces/reconcile_loop.py": (
        "tests/service/test_operator_logs.py",
        "tests/service/test_reconcile_loop.py",
    ),
    "kata_mem/core/golang.py": (
        "tests/oracle/test_golang_oracle.py",
        "tests/unit/test_golang.py",
        "tests/unit/test_annotation_cases.py",
        "tests/unit/test_config.py",
    ),
    "kata_mem/core/gosyntax.py": (
        "tests/unit/test_gosyntax.py",
        "tests/unit/test_golang.py",
        "tests/unit/test_annotation_cases.py",
        "tests/oracle/test_golang_oracle.py",
    ),
    "kata_mem/edges/config.py": (
        "tests/unit/test_plan_cases.py",
        "tests/unit/test_config.py",
        "tests/unit/test_kata_cases.py",
    ),
    "kata_mem/core/annotations.py": (
        "tests/unit/test_kata_cases.py",
        "tests/unit/test_annotation_cases.py",
    ),
    "kata_mem/interfaces/render.py": ("tests/unit/test_plan_cases.py", "tests/cli/test_preview.py"),
    "kata_mem/backends/libvirt.py": ("tests/integration/test_vmm_pid.py",),
    "kata_mem/interfaces/aiohttp_adapter.py": ("tests/service/test_lifecycle.py",),
    "kata_mem/interfaces/shim_client.py": ("tests/service/test_shim_client.py",),
    "kata_mem/interfaces/shim.py": ("tests/service/test_shim_client.py",),
    "kata_mem/interfaces/serve.py": ("tests/service/test_shim_client.py",),
    "kata_mem/interfaces/main.py": (
        "tests/service/test_shim_client.py",
        "tests/cli/test_errors.py",
    ),
    "kata_mem/interfaces/stops.py": (
        "tests/service/test_shim_client.py",
        "tests/cli/test_errors.py",
    ),
    "kata_mem/edges/service_record.py": ("tests/service/test_shim_client.py",),
    "kata_mem/backends/qmp_socket.py": (
        "tests/integration/test_vm_presence.py",
        "tests/service/test_lifecycle.py",
    ),
    "kata_mem/backends/qmp.py": ("tests/integration/test_qmp_port.py",),
    "kata_mem/edges/journal.py": ("tests/unit/test_node_view.py", "tests/cli/test_vm_owner.py"),
    "kata_mem/edges/statefiles.py": ("tests/unit/test_statedir_listing.py",),
    "kata_mem/edges/statedir.py": ("tests/unit/test_statedir_listing.py",),
    "scripts/install-node.sh": ("tests/cli/test_install_layout.py",),
    "kata_mem/orchestration/handle.py": ("tests/unit/test_ledger.py",),
    "kata_mem/orchestration/reconcile.py": ("tests/unit/test_ledger.py",),
    # The rules kata-mem takes from upstream: the differential tests run upstream's own
    # code (tests/oracle, built by scripts/build-oracles.sh) beside it, then the tables.
    "kata_mem/core/quantity.py": (
        "tests/oracle/test_quantity_oracle.py",
        "tests/oracle/test_pod_oracle.py",
        "tests/unit/test_quantity.py",
    ),
    "kata_mem/edges/pod.py": ("tests/oracle/test_pod_oracle.py", "tests/unit/test_pod_cases.py"),
    "kata_mem/core/record.py": (
        "tests/unit/test_record.py",
        "tests/unit/test_host_side.py",
        "tests/unit/test_ledger.py",
        "tests/unit/test_journal_values.py",
        "tests/unit/test_executor.py",
    ),
}


@dataclass(frozen=True)
class Break:
    """``old`` (exactly once in ``file``) becomes ``new``; the name says what that does.

    ``first``: test ids among the guards of ``file`` that kill this break, run on their own
    before the guards, where the module order would reach them late (a slow module, or a
    test that waits out a deadline): a break they kill is killed in their time. If they pass,
    every other guard still runs, and the report names the break whose ``first`` is stale."""

    name: str
    file: str
    old: str
    new: str
    first: tuple[str, ...] = ()


SAFETY = "kata_mem/core/safety.py"
MODEL = "kata_mem/core/model.py"
USAGE = "kata_mem/orchestration/usage.py"
OUTCOMES = "kata_mem/core/outcomes.py"
WORKLOAD = "kata_mem/core/plan/workload.py"
GEOMETRY = "kata_mem/core/plan/geometry.py"
PLAN_GUARDS = "kata_mem/core/plan/guards.py"
STEPS = "kata_mem/core/plan/steps.py"
MEMORY = "kata_mem/core/plan/memory.py"
VCPUS = "kata_mem/core/plan/vcpus.py"
RECORD = "kata_mem/core/record.py"
GUESTMEM = "kata_mem/core/guestmem.py"
EXECUTOR = "kata_mem/orchestration/executor.py"
ENDPOINT = "kata_mem/core/endpoint.py"
REQUEST = "kata_mem/core/request.py"
QUANTITY = "kata_mem/core/quantity.py"
POD = "kata_mem/edges/pod.py"
GOLANG = "kata_mem/core/golang.py"
GOSYNTAX = "kata_mem/core/gosyntax.py"
CONFIG = "kata_mem/edges/config.py"
INSTALL = "scripts/install-node.sh"
LAYOUT = "tests/cli/test_install_layout.py::"
CEILING = "tests/unit/test_guest_ceiling.py::"
QMP_PORT = "tests/integration/test_qmp_port.py::"
LOOP_TESTS = "tests/service/test_reconcile_loop.py::"
SHIM_TESTS = "tests/service/test_shim_client.py::"
LIFECYCLE = "tests/service/test_lifecycle.py::"
GROW = "tests/unit/test_grow_confirmation.py::"
EXECUTOR_TESTS = "tests/unit/test_executor.py::"
#: Kata's Go runtime's recorded answers, replayed (kata-cases/go-runtime.json).
KATA_REPLAY = "tests/unit/test_kata_cases.py::test_kata_mem_answers_as_katas_go_runtime"
#: Each row of pod-cases/ decided by Kubernetes' own code beside kata-mem's (tests/oracle).
POD_ORACLE_CASES = (
    "tests/oracle/test_pod_oracle.py::test_each_pod_case_is_decided_as_kubernetes_decides_it"
)
NODE_VIEW = "kata_mem/interfaces/node_view.py"
LOOP = "kata_mem/interfaces/reconcile_loop.py"
ANNOTATIONS = "kata_mem/core/annotations.py"

BREAKS = (
    # -- the shrink-safety rule (safety.py, model.py) ------------------------------------
    Break(
        "headroom-zero",
        SAFETY,
        "return max(settings.headroom_min, block, target_total * settings.headroom_percent // 100)",
        "return 0",
    ),
    Break("ignore-reading-age", SAFETY, "if age > settings.usage_max_age_s:", "if False:"),
    Break(
        "all-caches-reclaimable",
        MODEL,
        "return max(min(self.disk_caches, self.available - self.free), 0)",
        "return max(self.disk_caches, 0)",
    ),
    Break(
        "ignore-major-faults",
        SAFETY,
        "if faults is not None and faults > MAJOR_FAULTS_PRESSURE:",
        "if False:",
    ),
    Break("no-pressure-check", SAFETY, "    if spare < floor:\n", "    if False:\n"),
    Break(
        "unknown-usage-runs",
        SAFETY,
        'return Verdict(\n            "defer",\n            "UsageUnknown",\n            "no guest memory statistics',
        'return Verdict(\n            "run",\n            "",\n            "no guest memory statistics',
    ),
    Break(
        "headroom-ignores-block",
        SAFETY,
        "return max(settings.headroom_min, block, ",
        "return max(settings.headroom_min, ",
    ),
    Break(
        "reserved-memory-ignored",
        SAFETY,
        "guest_after = usage.total - removed",
        "guest_after = after_total",
    ),
    Break(
        "fault-threshold-off-by-far",
        SAFETY,
        "MAJOR_FAULTS_PRESSURE = 1000",
        "MAJOR_FAULTS_PRESSURE = 100000",
    ),
    Break(
        "age-limit-inclusive-flip",
        SAFETY,
        "if age > settings.usage_max_age_s:",
        "if age >= settings.usage_max_age_s:",
    ),
    # -- which reading a shrink step is judged on (usage.py) -----------------------------
    Break(
        "fresh-wait-one-interval",
        USAGE,
        "deadline = self._clock() + 3 * self._settings.stats_interval_s + 2.0",
        "deadline = self._clock() + self._settings.stats_interval_s",
    ),
    Break(
        "old-reading-judged-as-current",
        USAGE,
        "current = self._total_before_last if ambiguous else vm.total",
        "current = vm.total",
    ),
    Break(
        "stale-since-call-start",
        USAGE,
        "since = self._last_end if self._last_end is not None else self._started",
        "since = self._started",
    ),
    Break(
        "defer-on-reading-before-call",
        USAGE,
        'if verdict.action == "defer" and stale:',
        'if verdict.action == "defer" and ambiguous:',
    ),
    Break(
        "fresh-reading-judged-as-old",
        USAGE,
        "verdict = judge(usage, self._total_before_last if stale and ambiguous else vm.total)",
        "verdict = judge(usage, self._total_before_last)",
    ),
    Break(
        "last-step-reading-not-awaited",
        USAGE,
        "return self.fresh(after=self._last_end)",
        "return self.latest()",
    ),
    # -- the outcomes (outcomes.py) --------------------------------------------------------
    Break(
        "refuse-only-planned-shrinks",
        OUTCOMES,
        "if allowed or max(m.aligned, vm.base) >= vm.total:",
        "if allowed or not m.steps or max(m.aligned, vm.base) >= vm.total:",
    ),
    Break(
        "refusal-ignores-boot-memory",
        OUTCOMES,
        "max(m.aligned, vm.base) >= vm.total",
        "m.aligned >= vm.total",
    ),
    Break(
        "pending-unplug-blocks-growth",
        OUTCOMES,
        "if m.aligned < vm.total and any(d.pending_unplug for d in vm.devices):",
        "if any(d.pending_unplug for d in vm.devices):",
    ),
    Break(
        "no-free-slots-wrong-cause",
        OUTCOMES,
        '    "slots": "NoFreeSlots",',
        '    "slots": "NoDeviceSpace",',
    ),
    Break(
        "guest-memmap-stop-not-named",
        OUTCOMES,
        '    "guest_memmap": "NoMemmapRoom",\n',
        "",
    ),
    Break(
        "grow-stop-any-clamp",
        OUTCOMES,
        "c.cause in GROW_STOPPED and c.limit == vm.total",
        "c.cause in GROW_STOPPED",
    ),
    Break(
        "below-base-by-target",
        OUTCOMES,
        "if m.requested < vm.base:",
        "if m.target < vm.base:",
    ),
    Break(
        "resized-unverified",
        OUTCOMES,
        "if stop is None and vm.total == m.target:",
        "if stop is None:",
    ),
    Break(
        "partial-shrink-without-a-step",
        OUTCOMES,
        'if stop.status == "Deferred" and done and m.shrink:',
        'if stop.status == "Deferred" and m.shrink:',
    ),
    Break(
        "timeout-reported-rejected",
        OUTCOMES,
        'if progress.state == "rejected":',
        'if progress.state != "done":',
    ),
    Break(
        "backoff-off-by-one",
        OUTCOMES,
        "doublings = max(attempts - 1, 0)",
        "doublings = max(attempts, 0)",
    ),
    Break(
        "backoff-uncapped",
        OUTCOMES,
        "return float(min(BACKOFF_START_S * 2 ** min(doublings, cap), BACKOFF_MAX_S))",
        "return float(BACKOFF_START_S * 2 ** min(doublings, cap))",
    ),
    Break(
        "backoff-on-every-stop",
        OUTCOMES,
        'retry_after_s=backoff(deferrals + 1) if stop.status == "Deferred" else None,',
        "retry_after_s=backoff(deferrals + 1),",
    ),
    # -- the planner's clamps (core/plan/) --------------------------------------------------
    Break(
        "maxmemory-above-host-kept",
        GEOMETRY,
        "if configured == 0 or configured > host_mem:",
        "if configured == 0:",
    ),
    Break(
        "clamp-at-max-off-by-one",
        MEMORY,
        "    if target > top.ceiling:\n        said = _cause_text(",
        "    if target >= top.ceiling:\n        said = _cause_text(",
    ),
    Break("hugepage-pool-flipped", GEOMETRY, "if pool < ceiling:", "if pool > ceiling:"),
    Break(
        "always-round-down",
        MEMORY,
        "aligned = align_up(want, block)",
        "aligned = align_down(want, block)",
    ),
    Break(
        "round-down-at-max",
        MEMORY,
        "if origin + aligned > upper.limit:",
        "if origin + aligned >= upper.limit:",
    ),
    Break(
        "round-up-past-guard-room",
        MEMORY,
        "target = whole_blocks(mech, vm, target, block, upper, clamp)",
        'target = whole_blocks(mech, vm, target, block, Upper(top.ceiling, ""), clamp)',
    ),
    Break(
        "48x-of-boot-memory",
        STEPS,
        "align_down(ACPI_HOTPLUG_FACTOR * total, block)",
        "align_down(ACPI_HOTPLUG_FACTOR * vm.base, block)",
    ),
    Break(
        "slots-ignore-plugged-dimms",
        STEPS,
        "free_slots = vm.slots - len(vm.dimms)",
        "free_slots = vm.slots",
    ),
    Break(
        "device-space-ignores-used",
        STEPS,
        "else vm.device_space - vm.space_used",
        "else vm.device_space",
    ),
    Break(
        "cgroup-loosest-level",
        PLAN_GUARDS,
        "if best is None or room < best[0]:",
        "if best is None or room > best[0]:",
    ),
    Break(
        "cgroup-overhead-per-gib-dropped",
        PLAN_GUARDS,
        "by_model = (usable - s.vmm_overhead) * GiB // (GiB + s.vmm_overhead_per_gib)",
        "by_model = usable - s.vmm_overhead",
    ),
    Break(
        "cgroup-charge-counts-guest",
        PLAN_GUARDS,
        "other = max((level.usage or 0) - current, 0)",
        "other = max(level.usage or 0, 0)",
    ),
    Break(
        "node-budget-ignores-others",
        PLAN_GUARDS,
        "room = align_down(max(budget - others, 0), MiB)",
        "room = align_down(max(budget, 0), MiB)",
    ),
    Break(
        "guard-shrinks-the-vm",
        PLAN_GUARDS,
        "bound = max(room, now)",
        "bound = room",
    ),
    # -- the guest's own ceiling (guestmem.py, core/plan/) ----------------------------------
    Break(
        "memmap-half-a-struct-page",
        GUESTMEM,
        "return max(room, 0) // STRUCT_PAGE * PAGE_SIZE[arch]",
        "return max(room, 0) // (STRUCT_PAGE // 2) * PAGE_SIZE[arch]",
    ),
    Break(
        "movable-paid-from-everything",
        GUESTMEM,
        'kernel_memory = base if policy.onlining == "movable" else total',
        "kernel_memory = total",
    ),
    Break(
        "plugged-memmap-not-paid",
        GUESTMEM,
        "kernel_memory * AVAILABLE_NUM // AVAILABLE_DEN - memmap_plugged, 0",
        "kernel_memory * AVAILABLE_NUM // AVAILABLE_DEN, 0",
    ),
    Break(
        "guest-reading-ignored",
        GUESTMEM,
        "available = estimate if reading is None else max(reading, 0)",
        "available = estimate",
    ),
    Break(
        "guest-headroom-dropped",
        GUESTMEM,
        "room = max(available - headroom, 0)",
        "room = max(available, 0)",
    ),
    Break(
        "online-kernel-read-as-movable",
        GUESTMEM,
        'state.value == "online_kernel":\n        onlining, onlining_from = "kernel"',
        'state.value == "online_kernel":\n        onlining, onlining_from = "movable"',
    ),
    Break(
        "kata-guest-read-as-movable",
        GUESTMEM,
        'onlining, onlining_from = "kernel", KATA_ONLINING',
        'onlining, onlining_from = "movable", KATA_ONLINING',
    ),
    Break(
        "kernel-params-past-the-dashes",
        GUESTMEM,
        'if param.value is None and param.name == "--":',
        "if False:",
    ),
    Break(
        "kernel-params-dash-is-not-underscore",
        GUESTMEM,
        'return self.name.replace("-", "_")',
        "return self.name",
    ),
    Break(
        "kernel-params-first-occurrence-wins",
        GUESTMEM,
        "return next((p for p in reversed(params) if p.key == key and takes(p.value)), None)",
        "return next((p for p in params if p.key == key and takes(p.value)), None)",
    ),
    Break(
        "kernel-zone-dimms-unplugged",
        OUTCOMES,
        "held = [d for d in unplugs if d in kernel]",
        "held: list[str] = []",
    ),
    Break(
        "auto-movable-ratio-ignored",
        GUESTMEM,
        "        if movable + dimm.size <= room:",
        "        if True:",
    ),
    Break(
        "memmap-counted-for-virtio-mem",
        GUESTMEM,
        'memmap = settings.guest_memmap_on_memory and mech == "pc-dimm"',
        "memmap = settings.guest_memmap_on_memory",
    ),
    Break(
        "static-sized-by-the-model",
        MEMORY,
        "    static = static_size(cfg, need)\n    if static is not None:\n        if cfg",
        "    static = None\n    if static is not None:\n        if cfg",
    ),
    Break(
        "below-the-boot-memory-reached",
        MEMORY,
        "aligned_target = unreached if below_base else target",
        "aligned_target = target",
        first=(
            EXECUTOR_TESTS + "test_a_vm_kata_sized_at_boot_is_resized_never_below_its_boot_memory",
        ),
    ),
    Break(
        "static-vm-assumed-at-default-memory",
        GEOMETRY,
        "        return min(static, host_ceiling(cfg, host)[0])",
        "        return min(cfg.default_memory, host_ceiling(cfg, host)[0])",
    ),
    Break(
        "runtime-rs-maxmem-reserve",
        GEOMETRY,
        "        return max(ceiling, base)\n",
        "        return ceiling + QEMU_MAXMEM_RESERVE\n",
        first=(
            "tests/unit/test_fidelity.py::test_the_assumed_vm_has_qemu_s_device_space_as_each_runtime_asks_for_it",
        ),
    ),
    Break(
        "guest-clamp-off",
        MEMORY,
        '        if target > bound:\n            clamp("guest_memmap"',
        '        if False:\n            clamp("guest_memmap"',
    ),
    Break(
        "dimm-stage-cap-ignored",
        STEPS,
        "            size = min(size, room)\n",
        "            pass\n",
    ),
    Break(
        "virtio-mem-stage-cap-ignored",
        STEPS,
        "                new = min(want, size + room)",
        "                new = want",
    ),
    Break(
        "stage-ignores-the-reading",
        MEMORY,
        "guest = ceiling_at(policy, cfg.settings, host.arch, base, now, guest_available)",
        "guest = ceiling_at(policy, cfg.settings, host.arch, base, now, None)",
        first=(CEILING + "test_a_reading_below_the_estimate_lowers_the_movable_ceiling",),
    ),
    Break(
        "grow-confirmed-without-the-guest",
        GUESTMEM,
        "return now_total - before_total >= grown - memmap_size(grown, arch)",
        "return True",
        first=(GROW + "test_a_guest_that_never_shows_the_memory_is_not_resized",),
    ),
    Break(
        "grow-timeout-not-scaled",
        GUESTMEM,
        "return settings.step_timeout_s + GROW_S_PER_GIB * max(added, 0) / GiB",
        "return settings.step_timeout_s",
        first=(GROW + "test_grow_timeouts_scale_with_the_size",),
    ),
    Break(
        "staged-step-without-room",
        EXECUTOR,
        "return room.addable >= following.delta",
        "return True",
    ),
    Break(
        "silent-guest-no-change",
        EXECUTOR,
        "if reader.latest() is None or reader.answers():",
        "if True:",
    ),
    Break(
        "grow-measured-from-an-old-reading",
        EXECUTOR,
        "return reader.recent() if force else reader.fresh()",
        "return reader.recent()",
    ),
    Break(
        "guest-asked-before-its-count-is-read",
        "kata_mem/backends/qmp.py",
        "                self._stats_count(path),\n"
        '                ("qom-get", {"path": path, "property": "guest-stats"}),\n'
        "                stop,\n"
        "                restart,\n",
        "                stop,\n"
        "                restart,\n"
        "                self._stats_count(path),\n"
        '                ("qom-get", {"path": path, "property": "guest-stats"}),\n',
        first=(QMP_PORT + "test_a_reading_and_the_ask_for_the_next_go_out_in_one_exchange",),
    ),
    Break(
        "resize-read-before-the-change",
        "kata_mem/backends/qmp.py",
        'self._read_ahead([resize, ("query-memory-devices", None)])',
        'self._read_ahead([("query-memory-devices", None), resize])',
    ),
    # -- the journal's record (record.py) --------------------------------------------------
    Break(
        "commitment-ignores-grow",
        RECORD,
        "return max(self.observed or 0, self.target or 0)",
        "return self.observed or 0",
    ),
    Break(
        "goal-ignores-deferred-shrink",
        RECORD,
        "return self.deferred.target",
        "return self.observed",
    ),
    Break(
        "finish-keeps-grow-target",
        RECORD,
        "            target=None,\n            deferred=self.deferred if",
        "            target=self.target,\n            deferred=self.deferred if",
    ),
    Break(
        "finish-keeps-deferral",
        RECORD,
        'deferred=self.deferred if status == "Deferred" else None,',
        "deferred=self.deferred,",
    ),
    Break(
        "defer-count-min-max-swapped",
        RECORD,
        "attempts = min(self.attempts + 1, MAX_ATTEMPTS)",
        "attempts = max(self.attempts + 1, MAX_ATTEMPTS)",
    ),
    Break(
        "due-before-retry-time",
        RECORD,
        "self.deferred.retry_at <= now",
        "self.deferred.retry_at >= now",
    ),
    # The reconcile loop: a VM that exits, a journal another process changes, a VM the
    # kernel cannot watch, a deferred shrink's retry time, and the ownership proof.
    Break(
        "vm-exit-not-visited",
        NODE_VIEW,
        "        self.gone |= names\n",
        "        names.clear()\n",
        first=(LOOP_TESTS + "test_the_kernel_tells_the_loop_a_vm_exited_and_a_journal_changed",),
    ),
    Break(
        "sandbox-change-not-read",
        NODE_VIEW,
        "                self.changed = True\n                self.dirty.add(sandbox)\n",
        "                self.changed = True\n",
    ),
    Break(
        "refused-sandbox-shown",
        NODE_VIEW,
        'return Entry("refused", None, why, sig, False, watched)',
        'return Entry("foreign", None, None, sig, False, watched)',
    ),
    Break(
        "deferred-retry-not-scheduled",
        LOOP,
        "times.append(record.deferred.retry_at)",
        "pass",
        first=(LOOP_TESTS + "test_the_loop_retries_a_deferred_shrink_when_it_is_due",),
    ),
    Break(
        "unwatched-vm-not-asked",
        LOOP,
        "            if not self.view.watched(name):\n",
        "            if False:\n",
        first=(LOOP_TESTS + "test_a_vm_the_kernel_cannot_watch_is_asked_at_every_interval",),
    ),
    Break(
        "safety-net-reads-only-what-events-said",
        LOOP,
        "        self.view.everything = True\n        if not await self._sync():",
        "        if not await self._sync():",
    ),
    # A VMM cgroup that cannot be seen read as "no limit" (the DaemonSet in a pod's own
    # cgroup namespace grew QEMU into an OOM kill), and the proof that a directory is the
    # process's cgroup.
    # Inputs arrive as arguments: the environment handle() passes down, not the process's.
    Break(
        "libvirt-reads-the-process-environment",
        "kata_mem/backends/libvirt.py",
        'env.get("XDG_RUNTIME_DIR")',
        'os.environ.get("XDG_RUNTIME_DIR")',
    ),
    Break(
        "crash-hook-reads-the-process-environment",
        EXECUTOR,
        "    if crash_at == name:",
        '    if os.environ.get("KATA_MEM_CRASH_AT") == name:',
        first=(EXECUTOR_TESTS + "test_the_crash_hook_is_not_read_from_the_process_environment",),
    ),
    Break(
        "host-memavailable-not-read",
        EXECUTOR,
        "vm, lambda: ledger.others(sandbox) if ledger else 0, mem_available",
        "vm, lambda: ledger.others(sandbox) if ledger else 0, lambda: None",
        first=("tests/unit/test_ledger.py::test_an_admitted_grow_is_told_the_hosts_memavailable",),
    ),
    Break(
        "unseen-cgroup-not-held",
        PLAN_GUARDS,
        "elif guards.unseen is not None and guards.pod_limit is None:",
        "elif False:",
    ),
    Break(
        "cgroup-procs-proof-dropped",
        "kata_mem/edges/cgroups.py",
        "            if str(pid) in listed:",
        "            if True:",
    ),
    Break(
        "namespace-climb-ignored",
        "kata_mem/edges/cgroups.py",
        "        if k > m or (k < m and len(root) > m):",
        "        if k != m:",
    ),
    # -- what kata-mem takes from upstream, which the oracles run beside it (tests/oracle) ---
    # Kubernetes' quantities (apimachinery ParseQuantity).
    Break("quantity-gi-is-2-to-the-29", QUANTITY, '"Gi": 30,', '"Gi": 29,'),
    Break(
        "quantity-rounds-down-to-nano",
        QUANTITY,
        "nanos = -(-value.numerator * 10**9 // value.denominator)",
        "nanos = value.numerator * 10**9 // value.denominator",
    ),
    Break(
        "quantity-exponent-sign-lost",
        QUANTITY,
        "exp = int(suffix[1:])",
        "exp = abs(int(suffix[1:]))",
    ),
    # The API server's Pod defaulting and validation (pkg/apis/core/v1/defaults.go,
    # pkg/api/pod/util.go, pkg/apis/core/validation/validation.go).
    Break(
        "pod-limit-ignores-pod-request",
        POD,
        "limits[key] = max(request, container_limits[key])",
        "limits[key] = container_limits[key]",
        first=(POD_ORACLE_CASES,),
    ),
    Break(
        "pod-request-not-from-containers",
        POD,
        "requests[key] = from_containers[key] = total",
        "from_containers[key] = total",
        first=(POD_ORACLE_CASES,),
    ),
    Break(
        "container-request-not-its-limit",
        POD,
        "requests = {**limits, **given}",
        "requests = dict(given)",
        first=(POD_ORACLE_CASES,),
    ),
    Break(
        "quantity-not-rounded-to-milli",
        POD,
        "    if thousandths.denominator == 1:\n        return amount",
        "    if True:\n        return amount",
        first=(POD_ORACLE_CASES,),
    ),
    Break(
        "hugepages-any-number-of-bytes",
        POD,
        "            if whole % size:",
        "            if False:",
        first=(POD_ORACLE_CASES,),
    ),
    # Go's strconv.ParseFloat(s, 32) and regexp.MatchString, as Kata reads annotations.
    Break(
        "float-hex-exponent-of-ten",
        GOLANG,
        "value *= Fraction(2 if hexa else 10) ** exponent",
        "value *= Fraction(10) ** exponent",
    ),
    Break(
        "float-underscores-anywhere",
        GOLANG,
        "if i != n or (underscores and not underscore_ok(text)):",
        "if i != n:",
    ),
    Break(
        "regexp-anchored-at-the-start",
        GOLANG,
        "compiled.search(_SURROGATE.sub",
        "compiled.match(_SURROGATE.sub",
    ),
    Break(
        "float-plus-infinity-refused",
        GOLANG,
        'if lower in ("inf", "+inf", "infinity", "+infinity"):',
        'if lower in ("inf", "infinity"):',
    ),
    # -- the QMP monitor's socket (qmp_socket.py): a full backlog is waited for (issue 33) ---
    Break(
        "qmp-full-backlog-not-waited",
        "kata_mem/backends/qmp_socket.py",
        "        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)\n",
        "        sock.setblocking(False)\n",
        first=(LIFECYCLE + "test_an_answer_does_not_depend_on_the_requests_beside_it",),
    ),
    # -- serve's connections (aiohttp_adapter.py): a half-closed client is answered (issue 33)
    Break(
        "half-closed-client-not-answered",
        "kata_mem/interfaces/aiohttp_adapter.py",
        "        self.close()\n        return True\n",
        "        return False\n",
        first=(LIFECYCLE + "test_a_client_that_closes_its_sending_side_is_answered",),
    ),
    Break(
        "half-closed-cut-body-begun",
        "kata_mem/interfaces/aiohttp_adapter.py",
        "        if any(not body.is_eof() for body in self._arriving):",
        "        if False:",
        first=(LIFECYCLE + "test_a_client_that_closes_its_sending_side_is_answered",),
    ),
    # -- kata-mem-shim (shim_client.py, shim.py, main.py): issue 33 -------------------------
    Break(
        "shim-answer-unbounded",
        "kata_mem/interfaces/shim_client.py",
        "            if size > MAX_ANSWER_BYTES:",
        "            if False:",
        first=(SHIM_TESTS + "test_an_answer_larger_than_the_shim_reads_is_not_read",),
    ),
    Break(
        "shim-answer-waited-for-ever",
        "kata_mem/interfaces/shim_client.py",
        "            sock.settimeout(_left(deadline, sent))\n            chunk",
        "            sock.settimeout(None)\n            chunk",
        first=(
            SHIM_TESTS
            + "test_a_service_that_takes_the_request_and_never_answers_is_waited_for_until_the_deadline",
        ),
    ),
    Break(
        "shim-refusal-not-on-stderr",
        "kata_mem/interfaces/shim_client.py",
        "        _say_error(document)",
        "        pass",
    ),
    Break(
        "shim-second-signal-handled-again",
        "kata_mem/interfaces/stops.py",
        "        if self.stopping or self.answering:",
        "        if self.answering:",
        first=(SHIM_TESTS + "test_a_second_sigterm_while_the_service_works_answers_as_the_first",),
    ),
    Break(
        "stops-second-signal-handled-again",
        "kata_mem/interfaces/stops.py",
        "        self.stopping = True\n",
        "",
        first=(SHIM_TESTS + "test_a_second_sigterm_while_the_service_works_answers_as_the_first",),
    ),
    Break(
        "fallback-in-its-own-state",
        "kata_mem/interfaces/shim.py",
        "    return answer(as_served(request, record.config), env, CallOptions(state_dir=record.state_dir))",
        "    return answer(request, env)",
        first=(SHIM_TESTS + "test_answered_in_process_it_keeps_the_state_of_the_service",),
    ),
    Break(
        "fallback-without-record-applies",
        "kata_mem/interfaces/shim.py",
        "        if record is None and os.path.lexists(socket):",
        "        if False:",
        first=(
            SHIM_TESTS
            + "test_without_the_record_of_the_services_state_nothing_is_applied_in_process",
        ),
    ),
    Break(
        "service-record-not-published",
        "kata_mem/interfaces/serve.py",
        "        _publish(listener, state_dir, config)\n",
        "        pass\n",
        first=(SHIM_TESTS + "test_answered_in_process_it_keeps_the_state_of_the_service",),
    ),
    Break(
        "service-record-trusted-from-anyone",
        "kata_mem/edges/service_record.py",
        "        if info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o022:",
        "        if False:",
        first=(SHIM_TESTS + "test_a_record_kata_mem_must_not_trust_is_not_followed",),
    ),
    # -- one owner of each VM's memory (the owner check, from the files or serve's view) --
    Break(
        "vm-owner-never-found",
        "kata_mem/edges/journal.py",
        "vm_key(backend) != key:",
        "True:",
    ),
    Break(
        "vm-owner-from-a-reused-inode",
        "kata_mem/edges/journal.py",
        "        if not _other_vmm(backend, reached):\n",
        "        if True:\n",
    ),
    # -- the state directory set up by calls at once -------------------------------------
    Break(
        "temporary-name-per-process-only",
        "kata_mem/edges/statefiles.py",
        "f\".{name.lstrip('.')}.{os.getpid()}.{threading.get_native_id()}.tmp\"",
        "f\".{name.lstrip('.')}.{os.getpid()}.{0}.tmp\"",
    ),
    Break(
        "state-dir-made-meanwhile-called-dangling",
        "kata_mem/edges/statedir.py",
        "            if os.path.islink(root) and not os.path.exists(root):",
        "            if os.path.lexists(root):",
    ),
    # -- vCPUs as Kata holds them, float32 (issue 33, item 5) ------------------------------
    Break(
        "vcpus-added-exactly",
        VCPUS,
        "    requested = _float32(default + work_cpu)",
        "    requested = default + work_cpu",
    ),
    Break(
        "default-vcpus-read-as-a-decimal",
        CONFIG,
        "        default_vcpus=toml_float32(vcpus),",
        "        default_vcpus=Fraction(repr(vcpus)) if isinstance(vcpus, float) else Fraction(vcpus),",
    ),
    Break(
        "annotation-float-not-rounded",
        GOLANG,
        "    value = round_float32(value)\n",
        "    pass\n",
    ),
    Break(
        "float32-ties-away-from-zero",
        GOLANG,
        "significand = round(Fraction(n << max(-unit, 0), d << max(unit, 0)))",
        "significand = int(Fraction(n << max(-unit, 0), d << max(unit, 0)) + Fraction(1, 2))",
    ),
    Break(
        "float32-without-subnormals",
        GOLANG,
        "_FLOAT32_TINY_EXPONENT = -149",
        "_FLOAT32_TINY_EXPONENT = -1000",
    ),
    Break(
        "float32-printed-with-six-digits",
        "kata_mem/interfaces/render.py",
        'f"containers {format_float32(v.containers)} = {summed}), max {v.max}, host {v.host}{vc}"',
        'f"containers {format_float32(v.containers)} = {float(v.requested):g}), max {v.max}, '
        'host {v.host}{vc}"',
    ),
    # -- Go's regexp limits (gosyntax.py, golang.py; issue 33, item 15) --------------------
    Break("go-nesting-unlimited", GOSYNTAX, "MAX_HEIGHT = 1000", "MAX_HEIGHT = 100_000"),
    Break(
        "go-size-unlimited",
        GOSYNTAX,
        "MAX_SIZE = (128 << 20) // 40",
        "MAX_SIZE = (128 << 30) // 40",
    ),
    Break(
        "go-runes-unlimited",
        GOSYNTAX,
        "MAX_RUNES = (128 << 20) // 4",
        "MAX_RUNES = (128 << 30) // 4",
    ),
    Break("go-group-is-a-level", GOSYNTAX, "        if re2.cap == 0:", "        if False:"),
    Break(
        "go-refusal-left-to-re2",
        GOLANG,
        "    refused = parse_error(pattern)\n    if refused is not None:",
        "    refused = parse_error(pattern)\n    if False:",
    ),
    # -- what Kata's Go runtime answered, recorded (issue 34: tests/unit/test_kata_cases.py) --
    Break(
        "annotation-pattern-anchored",
        ANNOTATIONS,
        "return any(golang.regexp_match(p, name) for p in patterns)",
        'return any(golang.regexp_match(f"^(?:{p})$", name) for p in patterns)',
        first=(KATA_REPLAY,),
    ),
    Break(
        "annotation-not-checked",
        ANNOTATIONS,
        "        if not enabled(cfg.enable_annotations, key):",
        "        if False:",
        first=(KATA_REPLAY,),
    ),
    Break(
        "static-memory-rounded-up",
        WORKLOAD,
        "return cfg.default_memory + to_mib_floor(need.total_memory) * MiB",
        "return cfg.default_memory + -(-need.total_memory // MiB) * MiB",
    ),
    Break(
        "static-vcpus-without-workload",
        VCPUS,
        "        boot = max(math.ceil(_float32(default + work_cpu)), 1)",
        "        boot = max(math.ceil(_float32(default)), 1)",
    ),
    Break(
        "drop-ins-typed-merged-only",
        CONFIG,
        '    if runtime == "go":\n        _each_file_typed(each, files)',
        "    if False:\n        _each_file_typed(each, files)",
    ),
    Break(
        "drop-in-opened-table-a-hypervisor",
        CONFIG,
        'kept = {k: v for k, v in tables.items() if v or origins.get(("hypervisor", k)) == first}',
        "kept = tables",
    ),
    # -- the records (values.py): the fields a value's __eq__ and __hash__ leave out ---------
    Break(
        "endpoint-saved-compared",
        ENDPOINT,
        "return (self.kind, self.target, self.domain, self.vmm)",
        "return (self.kind, self.target, self.domain, self.vmm, self.saved)",
    ),
    Break(
        "host-cgroup-origin-compared",
        REQUEST,
        "return (self.memory, self.cpus, self.arch, self.hugepages, self.cgroup)",
        "return (self.memory, self.cpus, self.arch, self.hugepages, self.cgroup, self.cgroup_origin)",
    ),
    Break(
        "host-cgroup-not-compared",
        REQUEST,
        "return (self.memory, self.cpus, self.arch, self.hugepages, self.cgroup)",
        "return (self.memory, self.cpus, self.arch, self.hugepages)",
    ),
    # -- the node's ledger: whoever forgets a sandbox releases its entry (issue 35) --------
    Break(
        "shim-delete-keeps-the-ledger-entry",
        "kata_mem/orchestration/handle.py",
        "        release(state_dir, sandbox)  # its journal is gone: the node's total falls now\n",
        "        pass\n",
    ),
    Break(
        "reconcile-forget-keeps-the-ledger-entry",
        "kata_mem/orchestration/reconcile.py",
        "            release(state_dir, sandbox)  # its journal is gone: the node's total falls now\n",
        "            pass\n",
    ),
    # -- the node install touches only what it wrote (install-node.sh, issue 33) ----------
    Break(
        "install-takes-a-path-it-did-not-write",
        INSTALL,
        'theirs) refusals+=("$p: not written by install-node.sh',
        'theirs) true+=("$p: not written by install-node.sh',
        first=(LAYOUT + "test_the_install_stops_at_a_file_it_did_not_write",),
    ),
    Break(
        "install-rewrites-an-edited-unit",
        INSTALL,
        "            keep[$p]=1\n",
        "",
        first=(LAYOUT + "test_an_upgrade_keeps_a_unit_the_admin_edited_and_names_what_it_kept",),
    ),
    Break(
        "install-takes-a-prefix-of-files",
        INSTALL,
        'stop "PREFIX $prefix: holds files install-node.sh did not write',
        'true "PREFIX $prefix: holds files install-node.sh did not write',
        first=(
            LAYOUT
            + "test_a_prefix_holding_a_virtualenv_of_its_own_is_neither_installed_into_nor_removed",
        ),
    ),
    Break(
        "manifest-hash-not-checked",
        INSTALL,
        '[ "${m_hash[$p]-}" = "$value" ] || {',
        "true || {",
        first=(LAYOUT + "test_an_upgrade_keeps_a_unit_the_admin_edited_and_names_what_it_kept",),
    ),
    Break(
        "another-users-file-taken",
        INSTALL,
        'if [ "${m_uid[$p]}" != 0 ] && [ "${m_uid[$p]}" != "$me" ]; then',
        "if false; then",
        first=(LAYOUT + "test_a_file_another_user_owns_is_never_acted_on",),
    ),
    Break(
        "uninstall-removes-what-changed",
        INSTALL,
        'elif as_written "$p" && inside_sound "$p"; then',
        "elif true; then",
        first=(LAYOUT + "test_uninstall_removes_what_the_install_wrote_and_names_what_it_left",),
    ),
    Break(
        "same-version-wheel-not-reinstalled",
        INSTALL,
        '"$prefix/bin/python" -I -m pip install -q --disable-pip-version-check \\\n',
        "true \\\n",
        first=(LAYOUT + "test_a_wheel_of_the_installed_version_is_installed_again_and_said_so",),
    ),
)


#: The copies share the tree's oracles (tests/oracle): a copy has no .cache, and its Go
#: sources are the tree's, so scripts/build-oracles.sh finds them built there. Bytecode is
#: written: each break is a pytest process of its own, and without the cached bytecode of
#: what pytest rewrites (hypothesis, a pytest plugin's package, is rewritten whole) each one
#: spent a second compiling before its first test.
ENV = {
    **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
    "KATA_MEM_ORACLE_DIR": os.environ.get("KATA_MEM_ORACLE_DIR") or str(ROOT / ".cache" / "oracle"),
}
#: A break killed by the rest of its guards once its ``first`` tests had passed.
STALE = "killed*"

#: The control: no change at all. It must pass, or every "killed" would mean nothing.
CONTROL = Break("none (control)", SAFETY, "", "")


def copy_tree(dest: Path) -> None:
    """The working tree without version control, virtualenvs or caches."""
    shutil.copytree(
        ROOT,
        dest,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", ".cache", "__pycache__", ".*_cache", ".hypothesis", "build", "dist"
        ),
    )


def applies(brk: Break, root: Path = ROOT) -> bool:
    return (root / brk.file).read_text().count(brk.old) == 1


def run_break(brk: Break, tests: tuple[str, ...], python: str) -> tuple[str, float]:
    with tempfile.TemporaryDirectory(prefix="kata-mem-break-") as tmp:
        work = Path(tmp)
        copy_tree(work)
        if brk is not CONTROL:
            if not applies(brk, work):
                return "does-not-apply", 0.0
            target = work / brk.file
            target.write_text(target.read_text().replace(brk.old, brk.new))
        started = time.monotonic()

        def pytest(ids: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [python, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q", *FAST, *ids],
                cwd=work,
                env=ENV,
                capture_output=True,
                text=True,
                check=False,
            )

        proc = pytest(brk.first or tests)
        stale = bool(brk.first) and proc.returncode == 0
        if stale:  # its first tests passed: every guard runs, -x stopping at the first failure
            proc = pytest(tests)
        took = time.monotonic() - started
        if proc.returncode == 1:
            return STALE if stale else "killed", took
        if proc.returncode == 0:
            return "survived", took
        return f"error (pytest exit {proc.returncode}): {(proc.stdout + proc.stderr)[-300:]}", took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", default=[], help="run only this break")
    parser.add_argument(
        "--full",
        action="store_true",
        help="run the whole fast suite for each break, not only the modules that guard its file",
    )
    parser.add_argument("--list", action="store_true", help="list the breaks and exit")
    parser.add_argument(
        "--jobs",
        type=int,
        # One more than the CPUs: a few breaks are killed by a test that waits out its
        # deadline (a loop that never notices, an answer that never comes), CPU left idle.
        default=(os.cpu_count() or 1) + 1,
        help="breaks run at once, each in its own copy (default: one more than the CPUs)",
    )
    parser.add_argument(
        "--no-control",
        action="store_true",
        help="skip the control run (the caller has just run the fast suite on this tree)",
    )
    args = parser.parse_args()
    unknown = sorted(set(args.only) - {b.name for b in BREAKS})
    if unknown:
        parser.error(f"no break named {', '.join(unknown)} (see --list)")
    chosen = [b for b in BREAKS if not args.only or b.name in args.only]
    for b in chosen:
        astray = [t for t in b.first if t.partition("::")[0] not in GUARDS[b.file]]
        if astray:
            parser.error(f"{b.name}: {', '.join(astray)} not in the guards of {b.file}")

    def tests_for(brk: Break) -> tuple[str, ...]:
        return ORDER if args.full else GUARDS[brk.file]

    if args.list:
        for b in BREAKS:
            print(f"{b.name}: {b.file}{'' if applies(b) else ' (does not apply)'}")
        return 0
    bad = stale = 0
    began = time.monotonic()
    print(f"{'break':32} {'module':22} {'result':10} seconds")
    if not args.no_control:
        every = tuple(dict.fromkeys(t for b in chosen for t in tests_for(b)))
        result, took = run_break(CONTROL, every, sys.executable)
        print(f"{CONTROL.name:32} {'':22} {result:10} {took:6.1f}", flush=True)
        if result != "survived":
            print("the unbroken copy does not pass these tests: fix that first")
            return 1
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        # The breaks with first tests are the slow ones (a slow module, a test that waits out
        # a deadline): started first, so that none is left running alone at the end.
        runs = {
            b: pool.submit(run_break, b, tests_for(b), sys.executable)
            for b in sorted(chosen, key=lambda b: not b.first)
        }
        for brk in chosen:
            result, took = runs[brk].result()
            module = brk.file.removeprefix("kata_mem/")
            print(f"{brk.name:32} {module:22} {result:10} {took:6.1f}", flush=True)
            bad += result not in ("killed", STALE)
            stale += result == STALE
    if stale:
        print(f"{STALE}: its first tests passed and a later guard killed it: update its first")
    print(
        f"{len(chosen) - bad} of {len(chosen)} breaks killed by the fast suite "
        f"({'the whole fast suite' if args.full else 'the modules that guard each'}), "
        f"{time.monotonic() - began:.0f} s in all"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
