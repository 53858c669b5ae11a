"""The Kata inputs the Kata oracle cases were generated from (tests/strategies.py
``kata_config_sets``, ``kata_sandbox_configs``, ``kata_sandbox_annotations``), on kata-mem
alone: every configuration and drop-in set is read or refused as a configuration error,
every sandbox's annotations are applied or refused as bad input, naming the spec (no other
exception). Kata's own answers to such inputs: tests/unit/test_kata_cases.py."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import strategies
from tests.support.kata_oracle import kata_mem_answer

_SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _answer(case: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as where:
        return kata_mem_answer({**case, "host_cpus": 2}, Path(where), 16384)


@_SETTINGS
@given(strategies.kata_config_sets())
def test_a_configuration_is_read_or_refused_as_one(case: dict[str, Any]) -> None:
    load = _answer(case)["load"]  # a refusal is a ConfigError, held as {"error"}; else a crash
    assert "error" in load or load["default_memory"] >= 256


@_SETTINGS
@given(st.tuples(strategies.kata_sandbox_configs(), strategies.kata_sandbox_annotations()))
def test_a_sandboxs_annotations_are_applied_or_refused_as_bad_input(
    pair: tuple[dict[str, Any], dict[str, str]],
) -> None:
    config, annotations = pair
    answer = _answer({**config, "annotations": annotations})
    assert "error" not in answer["load"]  # kata_sandbox_configs are files Kata loads
    sandbox = answer["sandbox"]
    if "error" in sandbox:
        assert sandbox["error"].startswith(str(Path("/")))  # names the spec it read
    else:
        assert sandbox["default_maxvcpus"] >= 1 and sandbox["default_memory"] >= 256
