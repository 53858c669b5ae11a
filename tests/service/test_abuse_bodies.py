"""Generated request bodies POSTed to ``kata-mem serve``: never a 500, always one JSON
document of the response schema, with the status its exit code gives."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kata_mem.core.endpoint import Endpoint
from kata_mem.core.values import replace
from tests.strategies import examples, sandbox_requests
from tests.support.service import Service
from tests.support.shim import CONFIG, RESPONSE_SCHEMA, request

#: The statuses an exit code maps to (docs, "The node service"); 500 is a bug.
STATUS = {0: 200, 2: 400, 3: 400, 4: 400, 6: 503, 7: 503, 8: 503, 9: 503}
#: No VM listens here: a request naming it gets as far as the backend and no further.
NO_VM = "/nonexistent/kata-mem-abuse/qmp.sock"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)


def _mutated(doc: dict[str, Any], changes: dict[str, Any], dropped: list[str]) -> bytes:
    out = {**doc, **changes}
    for key in dropped:
        out.pop(key, None)
    return json.dumps(out).encode()


def _no_vm(req: Any) -> bytes:
    # Only monitor sockets that are not there: a generated request never reaches a real
    # VM or a libvirt daemon.
    if req.endpoint is not None:
        req = replace(req, endpoint=Endpoint("qmp", NO_VM))
    return json.dumps(req.to_json()).encode()


FIELDS = list(request())
bodies = st.one_of(
    st.binary(max_size=512),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(
        _mutated,
        st.just(request(config=CONFIG)),
        st.dictionaries(st.sampled_from([*FIELDS, "extra"]), json_values, max_size=3),
        st.lists(st.sampled_from(FIELDS), max_size=2),
    ),
    sandbox_requests().map(_no_vm),
    sandbox_requests().map(lambda r: replace(r, config=CONFIG)).map(_no_vm),
)


@settings(
    max_examples=examples(0.5),  # each example is a request to the service: half the profile's
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(body=bodies)
def test_any_body_gets_a_schema_document_never_a_500(service: Service, body: bytes) -> None:
    got = service.post(body)
    code = int(got.headers["x-kata-mem-exit-code"])
    assert got.status == STATUS.get(code), (got.status, got.body)
    assert got.headers["content-type"].startswith("application/json")
    jsonschema.validate(got.json(), RESPONSE_SCHEMA)
