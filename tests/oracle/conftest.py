"""Fixtures of the differential tests: the oracles (tests/support/oracle.py), built by
scripts/build-oracles.sh and each run as one process for the whole session. scripts/test
builds them in the background before these tests run, and the script then finds each up to
date (the hash of its inputs); run by hand, it builds what is missing, or waits on the lock
of a build under way.

* ``go_oracle`` (session): Go's strconv and regexp (tests/oracle/golang).
* ``kubernetes_oracles`` (session): ``{"1.35": oracle, "1.37": oracle}``, Kubernetes'
  own code at each pinned release (tests/oracle/kubernetes).

A build that fails (no Go, a module the proxy does not serve) fails the tests, as missing
QEMU fails the guest tests: a differential test that cannot run upstream's code is no test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.oracle import Oracle, OracleError, build_oracles

RELEASES = ("1.35", "1.37")


@pytest.fixture(scope="session")
def oracle_programs() -> dict[str, Path]:
    try:
        return build_oracles()
    except OracleError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def go_oracle(oracle_programs: dict[str, Path]) -> Iterator[Oracle]:
    with Oracle(oracle_programs["golang"]) as oracle:
        yield oracle


@pytest.fixture(scope="session")
def kubernetes_oracles(oracle_programs: dict[str, Path]) -> Iterator[dict[str, Oracle]]:
    oracles = {r: Oracle(oracle_programs[f"kubernetes-{r}"]) for r in RELEASES}
    try:
        yield oracles
    finally:
        for oracle in oracles.values():
            oracle.close()
