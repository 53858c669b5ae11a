"""A sandbox request as a value: which sandbox, what it runs, where its VM is, and
what may be done. Pure: no file, socket, clock or environment.

:class:`SandboxRequest` is the shim protocol's request (schema
``kata-mem/shim-request/v1``; docs, "Runtime-shim integration") as a frozen
value. :meth:`SandboxRequest.from_json` reads and checks one, with errors that name
the field; :meth:`SandboxRequest.to_json` writes it back, which is what ``kata-mem
reconcile`` re-runs. The command line builds the same value from its options.

The values a request carries are read in their own modules, once, for every
interface: the endpoint (:mod:`kata_mem.core.endpoint`), CRI sandbox-sizing
annotations (:mod:`kata_mem.core.cri_annotations`), Kata's hypervisor annotations
(:mod:`kata_mem.core.annotations`), cpusets (:mod:`kata_mem.core.cpuset`),
architecture names and hugepage pools (:mod:`kata_mem.core.arch`) and a pod's new
resources (:mod:`kata_mem.core.sandbox_resources`). What is left here is the wire
schema itself, every field of it read and written in one module, with the strict
decoding of its bytes: about 650 lines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from kata_mem.core.annotations import hypervisor_annotations
from kata_mem.core.arch import check_hugepages, normalize_arch
from kata_mem.core.cpuset import cpuset_size
from kata_mem.core.cri_annotations import (
    ANN_POD_OVERHEAD,
    SANDBOX_SIZING_KEYS,
    overhead_annotation,
    sandbox_sizing,
    sizing_annotations,
)
from kata_mem.core.endpoint import Endpoint
from kata_mem.core.errors import InputError
from kata_mem.core.fields import REQUEST, KeyOnce, json_value, path, spelled_float
from kata_mem.core.model import (
    Arch,
    Container,
    Origin,
    PodResources,
    Role,
    State,
    Workload,
    check_sandbox_id,
    unique_containers,
)
from kata_mem.core.sandbox_resources import SandboxResize, SandboxResources
from kata_mem.core.units import INT64_MAX, INT64_MIN, UINT64_MAX, MiB
from kata_mem.core.values import Frozen, field

REQUEST_SCHEMA = "kata-mem/shim-request/v1"
RESPONSE_SCHEMA = "kata-mem/shim-response/v1"
MAX_REQUEST_BYTES = 1 << 20

Event = Literal["create", "update", "update-sandbox", "delete", "reconcile"]
#: What is to be done with a request (:class:`SandboxRequest`).
Mode = Literal["plan", "apply", "dry-run", "delete"]
EVENTS: tuple[Event, ...] = ("create", "update", "update-sandbox", "delete", "reconcile")
STATES: tuple[State, ...] = ("running", "created", "stopped")
ROLES: tuple[Role, ...] = ("app", "init", "sidecar")

#: The smallest host memory an override may give (``--host-memory``, ``host.memory_bytes``).
MIN_HOST_MEMORY = MiB

_TOP = (
    "schema",
    "sandbox_id",
    "event",
    "config",
    "containers",
    "backend",
    "apply",
    "allow_shrink",
    "host",
    "annotations",
    "pod_resources",
    "sandbox_resources",
    "overhead",
)
_POD_RESOURCES = (
    "memory_limit_bytes",
    "hugepages_limit_bytes",
    "hugepage_limits",
    "cpu_quota",
    "cpu_period",
)
_CONTAINER = (
    "id",
    "state",
    "role",
    "memory_limit_bytes",
    "hugepages_limit_bytes",
    "hugepage_limits",
    "cpu_quota",
    "cpu_period",
    "cpuset",
)


# --- The parts of a request --------------------------------------------------------


class HostOverrides(Frozen):
    """Host facts given instead of probed (the CLI's ``--host-*``, a request's ``host``).

    ``arch`` is a Go name (:func:`normalize_arch`); ``hugepages`` is (count, page size
    in bytes), checked by :func:`check_hugepages`.
    """

    memory: Optional[int] = None
    cpus: Optional[int] = None
    arch: Optional[Arch] = None
    hugepages: Optional[tuple[int, int]] = None
    #: The VMM's host memory cgroup directory, instead of finding it from the VMM's pid.
    cgroup: Optional[str] = None
    #: Where ``cgroup`` was given (a request field, or the option that gave it), for its
    #: errors. Not part of the request's value (``__eq__``, ``__hash__``): a saved request
    #: reads back as a request's.
    cgroup_origin: Origin = Origin("request", "host.cgroup")

    def _compared(self) -> tuple[object, ...]:
        return (self.memory, self.cpus, self.arch, self.hugepages, self.cgroup)

    def __eq__(self, other: object) -> bool:
        if type(other) is not HostOverrides:
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._compared())

    def given(self) -> bool:
        return any(
            v is not None for v in (self.memory, self.cpus, self.arch, self.hugepages, self.cgroup)
        )

    def to_json(self) -> dict[str, Any]:
        """The request's ``host`` object: the overrides that are given."""
        doc: dict[str, Any] = {}
        for key, value in (
            ("memory_bytes", self.memory),
            ("cpus", self.cpus),
            ("arch", self.arch),
            ("cgroup", self.cgroup),
        ):
            if value is not None:
                doc[key] = value
        if self.hugepages is not None:
            doc["hugepages"] = {"count": self.hugepages[0], "size_bytes": self.hugepages[1]}
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any], at: str = "host") -> HostOverrides:
        """Read a request's ``host`` object.

        :raises InputError: a wrongly typed or out-of-range field, an unknown
            architecture, a bad hugepage pool, or an unknown field.
        """
        REQUEST.only(doc, ("memory_bytes", "cpus", "arch", "hugepages", "cgroup"), at)
        cgroup = _absolute(
            REQUEST.string(doc, "cgroup", at), path(at, "cgroup"), "cgroup directory"
        )
        name = REQUEST.string(doc, "arch", at)
        arch = None if name is None else normalize_arch(name, REQUEST.name(path(at, "arch")))
        pool = None
        pages = REQUEST.mapping(doc, "hugepages", at)
        if pages is not None:
            where = path(at, "hugepages")
            REQUEST.only(pages, ("count", "size_bytes"), where)
            pool = check_hugepages(
                REQUEST.required_integer(pages, "count", where, minimum=0),
                REQUEST.required_integer(pages, "size_bytes", where, minimum=1),
                REQUEST.name(where),
                arch,  # else the host's, checked when it is probed
            )
        return cls(
            memory=REQUEST.integer(doc, "memory_bytes", at, minimum=MIN_HOST_MEMORY),
            cpus=REQUEST.integer(doc, "cpus", at, minimum=1),
            arch=arch,
            hugepages=pool,
            cgroup=cgroup,
        )


def _absolute(value: Optional[str], at: str, what: str) -> Optional[str]:
    """``value``, a path a request names, which must be absolute: a shim runs in a
    directory of its own, and ``kata-mem reconcile`` (or ``serve``) re-runs the request
    from another, where a relative path names something else, or nothing.

    :raises InputError: naming the field ``at``.
    """
    if value is not None and not value.startswith("/"):
        raise REQUEST.fail(at, f"an absolute path (a {what})", value)
    return value


def _hugepage_limits_json(pairs: tuple[tuple[int, int], ...]) -> dict[str, Any]:
    if not pairs:
        return {}
    return {"hugepage_limits": [{"page_size_bytes": size, "limit_bytes": n} for size, n in pairs]}


def _hugepage_limits(
    item: dict[str, Any], at: str, total: int
) -> tuple[tuple[tuple[int, int], ...], int]:
    """An object's ``hugepage_limits`` (the limit of each page size, as the CRI's
    ``HugepageLimit`` list has them) and the hugepage total: their sum, which
    ``hugepages_limit_bytes``, when given too, must be.

    :raises InputError: not a list of objects, a page size that is no hugepage size of
        any architecture, a size given twice, or a total that is not the sum.
    """
    items = item.get("hugepage_limits")
    if items is None:
        return (), total
    where = path(at, "hugepage_limits")
    if not isinstance(items, list):
        raise REQUEST.fail(where, "null or a list of {page_size_bytes, limit_bytes}", items)
    pairs: dict[int, int] = {}
    for i, given in enumerate(items):
        one = path(where, i)
        entry = REQUEST.object(given, one)
        REQUEST.only(entry, ("page_size_bytes", "limit_bytes"), one)
        size = REQUEST.required_integer(entry, "page_size_bytes", one, minimum=1)
        check_hugepages(0, size, REQUEST.name(path(one, "page_size_bytes")))
        if size in pairs:
            raise REQUEST.fail(path(one, "page_size_bytes"), "each page size once", size)
        pairs[size] = REQUEST.required_integer(entry, "limit_bytes", one, minimum=0)
    summed = min(sum(pairs.values()), INT64_MAX)
    if item.get("hugepages_limit_bytes") is not None and total != summed:
        raise REQUEST.fail(
            path(at, "hugepages_limit_bytes"),
            f"the sum of hugepage_limits ({summed}) or null",
            total,
        )
    return tuple(sorted(pairs.items())), summed


def pod_resources_json(pod: PodResources) -> dict[str, Any]:
    """A request's ``pod_resources``: the limits the pod sets, in the container fields' units."""
    doc: dict[str, Any] = {}
    if pod.memory is not None:
        doc["memory_limit_bytes"] = pod.memory
    if pod.hugepages is not None:
        doc["hugepages_limit_bytes"] = pod.hugepages
    doc.update(_hugepage_limits_json(pod.hugepage_limits))
    if pod.cpu is not None:
        doc["cpu_quota"], doc["cpu_period"] = pod.cpu.numerator, pod.cpu.denominator
    return doc


def _pod_resources(doc: dict[str, Any]) -> Optional[PodResources]:
    """A request's ``pod_resources`` (KEP-2837 pod-level limits), read as a container's
    resources are: a memory or hugepages limit of null, 0 or less is none, and so is a
    CPU quota or period of null or 0 (or a negative quota, CFS's "unlimited")."""
    item = REQUEST.mapping(doc, "pod_resources")
    if item is None:
        return None
    at = "pod_resources"
    REQUEST.only(item, _POD_RESOURCES, at)
    memory = REQUEST.integer(item, "memory_limit_bytes", at) or 0
    hugepages = REQUEST.integer(item, "hugepages_limit_bytes", at, minimum=0) or 0
    sizes, hugepages = _hugepage_limits(item, at, hugepages)
    quota = REQUEST.integer(item, "cpu_quota", at) or 0
    period = REQUEST.integer(item, "cpu_period", at, minimum=0) or 0
    return PodResources(
        memory if memory > 0 else None,
        Fraction(quota, period) if quota > 0 and period > 0 else None,
        hugepages if hugepages > 0 else None,
        "request pod_resources",
        sizes,
    )


def _container_json(c: Container) -> dict[str, Any]:
    return {
        "id": c.name,
        "state": c.state,
        "role": c.role,
        "memory_limit_bytes": c.memory_limit,
        "hugepages_limit_bytes": c.hugepages_limit,
        **_hugepage_limits_json(c.hugepage_limits),
        "cpu_quota": c.cpu.numerator,
        "cpu_period": c.cpu.denominator,
        # Only the size of a cpuset counts, so any set of that size reproduces it.
        **({"cpuset": f"0-{c.cpuset_cpus - 1}"} if c.cpuset_cpus > 0 else {}),
    }


def _container(item: Any, at: str) -> Container:
    if not isinstance(item, dict):
        raise REQUEST.fail(at, "an object", item)
    REQUEST.only(item, _CONTAINER, at)
    state = REQUEST.choice(item, "state", STATES, at, "running")
    role = REQUEST.choice(item, "role", ROLES, at, "app")
    limit = REQUEST.integer(item, "memory_limit_bytes", at) or 0
    hugepages = REQUEST.integer(item, "hugepages_limit_bytes", at, minimum=0) or 0
    sizes, hugepages = _hugepage_limits(item, at, hugepages)
    quota = REQUEST.integer(item, "cpu_quota", at) or 0
    period = REQUEST.integer(item, "cpu_period", at, minimum=0) or 0
    cpu = Fraction(quota, period) if quota > 0 and period > 0 else Fraction(0)
    name = REQUEST.required_string(item, "id", at)
    cpuset, cpus = item.get("cpuset"), 0
    if cpuset is not None:
        if not isinstance(cpuset, str):
            raise REQUEST.fail(path(at, "cpuset"), 'null or a CPU list such as "0-3,7"', cpuset)
        cpus = cpuset_size(cpuset, REQUEST.name(path(at, "cpuset")))
    return Container(
        name, max(limit, 0), hugepages, cpu, role, state, REQUEST.name(at), cpus, sizes
    )


#: Where a lone surrogate can come from once the text is strict UTF-8: an escape
#: ``\uD800``-``\uDFFF``. A cheap filter: a match only means the decoded document is checked.
_MAYBE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")


def _decode(raw: bytes) -> Any:
    """``json.loads``, refusing what JSON can carry but a request must not: a key given
    twice in one object (:class:`~kata_mem.core.fields.KeyOnce`: an ``event`` given twice
    could mean ``update`` to the shim and ``delete`` to kata-mem), and text that is not
    UTF-8 (lone surrogates such as ``"\\udcff"``), which no path or id can be.

    The bytes are decoded as strict UTF-8 first: ``json.loads`` given bytes would
    guess UTF-16 or UTF-32 and skip a byte-order mark, and a JSON text exchanged between
    systems is UTF-8 without one (RFC 8259, section 8.1).

    :raises InputError: naming the byte, key or value and its path.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"request: byte 0x{raw[exc.start]:02x} at offset {exc.start} is not UTF-8; "
            "expected UTF-8 JSON"
        ) from exc
    if text.startswith("\ufeff"):
        raise InputError(
            "request: starts with a byte-order mark (U+FEFF); expected UTF-8 JSON without one"
        )
    if "\x00" in text:
        raise InputError(
            f"request: a NUL byte at offset {raw.index(0)} (UTF-16 or UTF-32 text?); "
            "expected UTF-8 JSON"
        )
    once = KeyOnce()
    try:
        doc = json.loads(text, object_pairs_hook=once, parse_float=spelled_float)
    except RecursionError as exc:
        # Python's own words ("maximum recursion depth exceeded while decoding...") name
        # its interpreter, not the request.
        raise InputError(
            "request: nested too deeply to read (more than a few hundred levels of arrays "
            "and objects); a shim request is a few levels deep"
        ) from exc
    except ValueError as exc:
        raise InputError(f"request is not JSON: {exc}") from exc
    if not once and not _MAYBE_SURROGATE.search(text):
        return doc  # the usual case: nothing to find, no walk
    # Depth-first in document order, without recursion (json.loads has already
    # bounded the depth, but the walk may start deeper in the stack than it did).
    todo: list[tuple[str, Any]] = [("", doc)]
    while todo:
        where, value = todo.pop()
        if isinstance(value, str):
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                raise InputError(
                    f"request {where or 'document'}: {json.dumps(value)[:80]} is not valid "
                    "Unicode (a lone surrogate); expected UTF-8 text"
                ) from exc
        elif isinstance(value, dict):
            refused = once.refusal(value, where, "request")
            if refused is not None:
                raise refused
            children: list[tuple[str, Any]] = []
            for key, item in value.items():
                children += [(f"{where or 'document'} key", key), (path(where, key), item)]
            todo.extend(reversed(children))
        elif isinstance(value, list):
            todo.extend(reversed([(path(where, i), v) for i, v in enumerate(value)]))
    return doc


def _kind(value: Any) -> str:
    """A JSON value by its type, with its text when it is a number or a boolean."""
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "an array"
    kind = "a boolean" if isinstance(value, bool) else "a number"
    return f"{kind}, {json_value(value)}"


# --- The request -------------------------------------------------------------------


def _document(data: Union[bytes, dict[str, Any]]) -> dict[str, Any]:
    """A request's document: its raw bytes decoded (or the document already decoded,
    whose keys and text are then taken as they are), an object of the schema, with
    known keys only.

    :raises InputError: as :meth:`SandboxRequest.from_json`.
    """
    if isinstance(data, bytes):
        if len(data) > MAX_REQUEST_BYTES:
            raise InputError(f"request larger than {MAX_REQUEST_BYTES} bytes")
        try:
            doc = _decode(data)
        except InputError as exc:
            # json.loads raises a plain ValueError (its syntax errors are
            # JSONDecodeErrors, text errors UnicodeErrors) for one thing only: an
            # integer longer than int() converts, whose message is Python's advice
            # to raise sys.set_int_max_str_digits(). Say what a request may hold.
            if type(exc.__cause__) is ValueError:
                raise InputError(
                    "request: a number of thousands of digits; expected integers of at "
                    f"most 64 bits ({INT64_MIN} to {UINT64_MAX})"
                ) from exc
            raise
    else:
        doc = data
    if not isinstance(doc, dict):
        raise REQUEST.fail("", "a JSON object", doc)
    if doc.get("schema") != REQUEST_SCHEMA:
        raise InputError(
            f"request schema: expected {REQUEST_SCHEMA!r}, got {json.dumps(doc.get('schema'))[:80]}"
        )
    REQUEST.only(doc, _TOP)
    return doc


class RequestHead(Frozen):
    """What a request names: its sandbox and its backend (``None``: none given)."""

    sandbox: str
    endpoint: Optional[Endpoint]


def _head(doc: dict[str, Any]) -> RequestHead:
    """The sandbox and the backend of a request's document (:func:`_document`), checked.

    :raises InputError: as :meth:`SandboxRequest.from_json`.
    """
    sandbox = REQUEST.required_string(doc, "sandbox_id")
    try:
        check_sandbox_id(sandbox)
    except InputError as exc:
        raise InputError(f"request sandbox_id: {exc.message}") from exc
    backend = REQUEST.mapping(doc, "backend")
    endpoint = None if backend is None else Endpoint.from_json(backend)
    if endpoint is not None and endpoint.kind == "qmp":
        _absolute(endpoint.target, "backend.socket", "QMP unix socket")
    return RequestHead(sandbox, endpoint)


def request_head(raw: bytes) -> RequestHead:
    """The sandbox and the backend of the request ``raw``, read only as far as they go:
    its document and those two checked as :meth:`SandboxRequest.from_json` checks them,
    the workload neither read nor checked (what ``status --all`` shows of a saved request).

    :raises InputError: as :meth:`SandboxRequest.from_json`, for what is read.
    """
    return _head(_document(raw))


class SandboxRequest(Frozen):
    """One request about one sandbox, and what is to be done with it (``mode``):

    - ``plan``: plan it against a freshly booted VM, as ``preview`` does; nothing runs;
    - ``apply``: resize the VM at ``endpoint``;
    - ``dry-run``: run the plan on an in-memory copy of the VM (read from ``endpoint``
      when given) and change nothing (the command line's ``apply --dry-run``);
    - ``delete``: forget the sandbox's state.

    ``event`` is what the shim said happened (``create``, ``update``, ``delete``,
    ``reconcile``); a ``delete`` event is the delete mode. ``config`` ``None`` means where
    Kata looks; ``host`` overrides the host probe.
    """

    sandbox: str
    event: Event = "update"
    config: Optional[str] = None
    workload: Workload = field(default_factory=Workload)
    endpoint: Optional[Endpoint] = None
    mode: Mode = "plan"
    allow_shrink: bool = False
    host: HostOverrides = field(default_factory=HostOverrides)
    #: The pod's new resources (event ``update-sandbox``, and the ``reconcile`` that
    #: repeats one); the workload is then :meth:`SandboxResize.workload`.
    resize: Optional[SandboxResize] = None

    def __post_init__(self) -> None:
        if self.mode == "apply" and self.endpoint is None:
            raise InputError("request apply: true needs a backend")
        if (self.event == "delete") != (self.mode == "delete"):
            raise ValueError(f"event {self.event!r} with mode {self.mode!r}")
        if self.event == "update-sandbox" and self.resize is None:
            raise InputError(
                "request event update-sandbox needs sandbox_resources (the pod's new resources "
                "from UpdatePodSandboxResourcesRequest.resources)"
            )
        if self.resize is not None and self.event not in ("update-sandbox", "reconcile"):
            raise InputError(
                f"request sandbox_resources with event {self.event}: expected event "
                "update-sandbox (container limits go in containers[])"
            )

    def to_json(self) -> dict[str, Any]:
        """The request as the shim reads it (schema ``kata-mem/shim-request/v1``)."""
        doc: dict[str, Any] = {
            "schema": REQUEST_SCHEMA,
            "sandbox_id": self.sandbox,
            "event": self.event,
            "config": self.config,
            "containers": [_container_json(c) for c in self.workload.containers],
            "backend": None if self.endpoint is None else self.endpoint.to_json(),
            "apply": self.mode == "apply",
            "allow_shrink": self.allow_shrink,
        }
        if self.host.given():
            doc["host"] = self.host.to_json()
        if self.resize is not None:  # the workload is made from it
            doc["sandbox_resources"] = self.resize.resources.to_json()
            doc["overhead"] = self.resize.overhead.to_json()
            if self.workload.hypervisor:
                doc["annotations"] = dict(self.workload.hypervisor)
            return doc
        annotations: dict[str, str] = {}
        if self.workload.sizing is not None:
            annotations.update(sizing_annotations(self.workload.sizing))
        if self.workload.overhead is not None:
            annotations[ANN_POD_OVERHEAD] = str(self.workload.overhead)
        annotations.update(self.workload.hypervisor)
        if annotations:
            doc["annotations"] = annotations
        if self.workload.pod is not None:
            doc["pod_resources"] = pod_resources_json(self.workload.pod)
        return doc

    @classmethod
    def from_json(cls, data: Union[bytes, dict[str, Any]]) -> SandboxRequest:
        """Read and check a request: its raw bytes, or the document already decoded
        (whose keys and text are then taken as they are).

        :raises InputError: too large, not JSON, a key given twice, text that is not
            UTF-8, an unknown schema version, a missing or wrongly typed field (named),
            or an unknown field.
        """
        doc = _document(data)
        head = _head(doc)
        sandbox, endpoint = head.sandbox, head.endpoint
        event = REQUEST.choice(doc, "event", EVENTS)
        config = _absolute(REQUEST.string(doc, "config"), "config", "Kata configuration file")
        items = doc.get("containers", [])
        if not isinstance(items, list):
            raise REQUEST.fail("containers", "a list", items)
        containers = unique_containers(
            tuple(_container(item, path("containers", i)) for i, item in enumerate(items))
        )
        apply = REQUEST.boolean(doc, "apply")
        mode: Mode = "delete" if event == "delete" else "apply" if apply else "plan"
        host = REQUEST.mapping(doc, "host")
        overrides = HostOverrides() if host is None else HostOverrides.from_json(host)
        annotations = doc.get("annotations")
        sizing = None
        overhead: Optional[tuple[int, str]] = None
        hypervisor: tuple[tuple[str, str], ...] = ()
        if annotations is not None:
            if not isinstance(annotations, dict):
                raise REQUEST.fail("annotations", "an object of strings", annotations)
            for key, value in annotations.items():
                if not isinstance(value, str):
                    # Named by key and type: Kubernetes annotation values are strings
                    # (ObjectMeta.Annotations is map[string]string), a number is a mistake.
                    where = REQUEST.name(path("annotations", key))
                    raise InputError(f"{where}: expected a string, got {_kind(value)}")
            if any(k in annotations for k in SANDBOX_SIZING_KEYS):
                sizing = sandbox_sizing(annotations, "request annotations")
            overhead = overhead_annotation(annotations, "request annotations")
            hypervisor = hypervisor_annotations(annotations)
        pod = _pod_resources(doc)
        workload = Workload(
            containers,
            sizing,
            overhead[0] if overhead is not None else None,
            f"annotation {overhead[1]}" if overhead is not None else "",
            pod,
            hypervisor,
            "request annotations" if hypervisor else "",
        )
        resize = _resize(doc)
        if resize is not None:
            # Kata's per-pod hypervisor annotations still choose the pod's configuration
            # (enable_annotations); nothing else may size the sandbox beside its new
            # resources.
            others = set(annotations or ()) - {key for key, _ in hypervisor}
            if containers or others or pod is not None:
                raise InputError(
                    "request sandbox_resources: expected no containers, no pod_resources and no "
                    "annotations but Kata's io.katacontainers.config.hypervisor.* with it (the "
                    "pod's new resources size the sandbox; container limits come with event "
                    "update)"
                )
            workload = resize.workload(hypervisor)
        return cls(
            sandbox=sandbox,
            event=event,
            config=config,
            workload=workload,
            endpoint=endpoint,
            mode=mode,
            allow_shrink=REQUEST.boolean(doc, "allow_shrink"),
            host=overrides,
            resize=resize,
        )


def _resize(doc: dict[str, Any]) -> Optional[SandboxResize]:
    """The request's ``sandbox_resources`` and ``overhead``, or ``None`` without them.

    :raises InputError: a wrongly typed field, or ``overhead`` without ``sandbox_resources``.
    """
    resources = REQUEST.mapping(doc, "sandbox_resources")
    overhead = REQUEST.mapping(doc, "overhead")
    if resources is None:
        if overhead is not None:
            raise InputError("request overhead: expected it only with sandbox_resources")
        return None
    return SandboxResize(
        SandboxResources.from_json(resources, "sandbox_resources"),
        SandboxResources()
        if overhead is None
        # An overhead is a size (a RuntimeClass's overhead.podFixed, which the API server
        # holds non-negative: kubernetes pkg/apis/node/validation validateOverhead), never
        # the negative "none" a limit may be.
        else SandboxResources.from_json(overhead, "overhead", memory_minimum=0),
    )


if TYPE_CHECKING:
    from pathlib import Path  # not imported by a plan-only shim call

#: Which other sandbox of a state directory already sizes the VM an endpoint reached
#: (:func:`kata_mem.edges.journal.vm_owner`): the state directory, the sandbox asking,
#: the endpoint as connecting reached it; the owner's id, or None.
VmOwner = Callable[["Path", str, Endpoint], Optional[str]]


class CallOptions(Frozen):
    """What one process adds to every request it serves, which no request carries: the
    state directory (``--state-dir``; ``None``: the configuration's), ``force``
    (``apply --force``: skip the shrink checks, for tests and benchmarks only), and
    ``vm_owner``: who answers a sandbox's first request's check that no other sandbox
    sizes its VM (``None``: :func:`kata_mem.edges.journal.vm_owner`, which reads every
    saved request; ``kata-mem serve`` answers it from its node view)."""

    state_dir: Optional[str] = None
    force: bool = False
    vm_owner: Optional[VmOwner] = None
