"""The metrics of ``kata-mem serve`` (``GET /metrics``, Prometheus text format).

Two kinds: what the state directory says now (each sandbox's current and target
memory, deferred shrinks pending), from the node's view that the kernel's events keep
current (:mod:`kata_mem.interfaces.node_view`: a CLI call or the shim's own answer is
seen too), else read from the journals at the scrape; and what the service answered
since it started (clamps, outcomes, backend errors, latency), counted from the
response documents it sent. One registry of its own, never the global one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Optional

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from kata_mem.core.results import Applied, Planned

if TYPE_CHECKING:
    from kata_mem.core.errors import KataMemError
    from kata_mem.core.model import Outcome, Unseen
    from kata_mem.core.record import Record
    from kata_mem.interfaces.node_view import Entry
    from kata_mem.interfaces.protocol import Answer

#: Backend error kinds (``error.kind`` of an error document); an outcome whose reason
#: is ``BackendError`` counts as ``backend`` too.
BACKEND_KINDS = ("backend", "backend-unavailable", "backend-unsupported")
CONTENT_TYPE = CONTENT_TYPE_LATEST


class _Journals(Collector):
    """Gauges read from the state directory at scrape time."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        #: The node view's entries at the scrape (:meth:`Metrics.text`), None: read the files.
        self.entries: Optional[tuple[tuple[str, Entry], ...]] = None

    def records(self) -> Iterator[tuple[str, Record]]:
        from kata_mem.core.errors import KataMemError
        from kata_mem.edges.journal import SandboxState
        from kata_mem.edges.statedir import list_state_dir

        if self.entries is not None:
            # Refused entries are left out, as below: GET /v1/node says why.
            yield from ((n, e.files.record) for n, e in self.entries if e.files is not None)
            return
        try:
            names = list_state_dir(self.state_dir).sandboxes
        except KataMemError:
            names = []  # not kata-mem's: GET /v1/node says why
        for name in names:
            try:
                yield name, SandboxState(self.state_dir, name).load(read_only=True)
            except KataMemError:
                continue  # refused (another user could have written it): GET /v1/node says so

    def collect(self) -> Iterator[Metric]:

        current = GaugeMetricFamily(
            "kata_mem_sandbox_current_bytes",
            "Guest memory last observed (boot + plugged), from the sandbox's journal.",
            labels=["sandbox"],
        )
        target = GaugeMetricFamily(
            "kata_mem_sandbox_target_bytes",
            "The target being worked towards: a grow in progress, a deferred shrink, or "
            "the observed size.",
            labels=["sandbox"],
        )
        deferred = 0
        for name, record in self.records():
            deferred += record.deferred is not None
            if record.observed is not None:
                current.add_metric([name], record.observed)
            if record.goal is not None:
                target.add_metric([name], record.goal)
        pending = GaugeMetricFamily(
            "kata_mem_deferred_shrinks",
            "Sandboxes whose shrink is deferred and waits for a retry.",
            value=deferred,
        )
        yield from (current, target, pending)


class Metrics:
    """The service's registry and the counters it updates."""

    def __init__(self, state_dir: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._journals = _Journals(state_dir)
        self.registry.register(self._journals)
        self.clamps = Counter(
            "kata_mem_clamps",
            "Plans whose memory target was clamped, by cause.",
            ["cause"],
            registry=self.registry,
        )
        self.outcomes = Counter(
            "kata_mem_outcomes",
            "Resize outcomes answered, by status and reason.",
            ["status", "reason"],
            registry=self.registry,
        )
        self.backend_errors = Counter(
            "kata_mem_backend_errors",
            "Requests that met a hypervisor failure, by error kind.",
            ["kind"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "kata_mem_request_seconds",
            "Time to answer a request, by endpoint and listener (unix socket or metrics address).",
            ["endpoint", "listener"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5, 20, 60),
            registry=self.registry,
        )
        self._latency: dict[tuple[str, str], Histogram] = {}
        self._scrape = threading.Lock()

        self.malformed = Counter(
            "kata_mem_malformed_requests",
            "HTTP requests refused before any endpoint: one aiohttp could not parse (400), or a "
            "bug answering one (500), by status and listener.",
            ["status", "listener"],
            registry=self.registry,
        )
        self.unseen = Counter(
            "kata_mem_host_cgroup_unseen",
            "Resizes and plans whose host cgroup guard could not see QEMU's cgroup (a grow "
            "is then held), by why: vmm_pid_unknown, not_reachable, unreadable.",
            ["reason"],
            registry=self.registry,
        )
        self.unseen_now = Gauge(
            "kata_mem_host_cgroup_unseen_sandboxes",
            "Sandboxes whose last resize could not see QEMU's host cgroup (/healthz: degraded).",
            registry=self.registry,
        )
        self.visits = Counter(
            "kata_mem_reconcile_visits",
            "Sandboxes the reconcile loop visited, by what it did (idle: nothing was due).",
            ["action"],
            registry=self.registry,
        )
        self.watched = Gauge(
            "kata_mem_reconcile_watched_vms",
            "Sandboxes whose VM the kernel watches (a pidfd on its QEMU, inotify on its "
            "monitor socket); the others are asked at every --reconcile-interval.",
            registry=self.registry,
        )
        self.full_passes = Counter(
            "kata_mem_reconcile_full_passes",
            "Full passes of the reconcile loop over every sandbox: one an interval after start, "
            "then one every ten minutes (between them, only what the kernel reports is read).",
            registry=self.registry,
        )

    def observe(self, endpoint: str, listener: str, seconds: float) -> None:
        """One request's time to answer. Each endpoint's and listener's series is looked
        up once (``labels`` takes the metric's lock and builds its key every time)."""
        series = self._latency.get((endpoint, listener))
        if series is None:
            series = self._latency[endpoint, listener] = self.latency.labels(endpoint, listener)
        series.observe(seconds)

    def count_visit(
        self, action: str, outcome: Optional[Outcome], unseen: Optional[Unseen] = None
    ) -> None:
        """Count one visit of the reconcile loop, and the outcome of a request it re-ran."""
        self.visits.labels(action).inc()
        if unseen is not None:
            self.unseen.labels(unseen.reason).inc()
        if outcome is not None:
            self.outcomes.labels(outcome.status, outcome.reason).inc()

    def count_answer(self, done: Answer) -> None:
        """Count what one shim answer came to: its clamps and outcome, or its error."""
        if done.error is not None:
            self.count_error(done.error)
            return
        response = done.response
        if isinstance(response, (Planned, Applied)):
            for clamp in response.plan.memory.clamps:
                self.clamps.labels(clamp.cause).inc()
            unseen = response.plan.memory.host_cgroup_unseen
            if unseen is not None:
                self.unseen.labels(unseen.reason).inc()
        if isinstance(response, Applied):
            outcome = response.outcome
            self.outcomes.labels(outcome.status, outcome.reason).inc()
            if outcome.reason == "BackendError":
                self.backend_errors.labels("backend").inc()

    def count_error(self, exc: KataMemError) -> None:
        """Count an error the service answered with (a hypervisor's, by its kind)."""
        if exc.kind in BACKEND_KINDS:
            self.backend_errors.labels(exc.kind).inc()

    def text(self, entries: Optional[tuple[tuple[str, Entry], ...]] = None) -> bytes:
        """The exposition, the sandboxes' gauges from ``entries`` (the node view's, taken
        on the event loop) when given, else from the journals. Scrapes run one at a time
        (the registry's collectors are not made for two at once with different views)."""
        with self._scrape:
            self._journals.entries = entries
            return generate_latest(self.registry)
