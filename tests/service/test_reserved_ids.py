"""``POST /v1/shim`` refuses a sandbox id that names one of kata-mem's own state-directory
entries, as the one-shot shim does."""

from __future__ import annotations

import pytest

from tests.support.service import Service
from tests.support.shim import request


@pytest.mark.parametrize("sandbox", ["kata-mem.sock", "kata-mem.sock.lock"])
def test_post_shim_refuses_a_reserved_sandbox_id(service: Service, sandbox: str) -> None:
    answer = service.post(request(sandbox_id=sandbox))
    assert (answer.status, answer.headers["x-kata-mem-exit-code"]) == (400, "4"), answer
    message = answer.json()["error"]["message"]
    assert message.startswith(f"request sandbox_id: sandbox id '{sandbox}': reserved"), message
    assert not (service.state / sandbox).exists()
