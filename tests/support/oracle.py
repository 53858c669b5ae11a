"""The oracles of the differential tests (tests/oracle/): Go programs that answer with
upstream's own code (Go's strconv and regexp; Kubernetes' quantities, Pod defaulting and
validation, component-helpers' PodRequests/PodLimits) what kata-mem decides by itself.

    binaries = build_oracles()                     # once a session (the fixture does it)
    with Oracle(binaries["golang"]) as go:         # one process for the whole test run
        go.ask({"op": "ParseBool", "text": "T"})   # -> {"ok": True, "value": "true"}
        go.ask_many([...])                         # many cases, one answer each, in order

``scripts/build-oracles.sh`` builds them (Go's caches and ``$KATA_MEM_ORACLE_DIR``, default
``<repo>/.cache/oracle``, keep them: an unchanged oracle is not built again). Each reads a
JSON case a line on stdin and writes a JSON answer a line on stdout.

How many generated cases a property test runs: ``ORACLE_EXAMPLES``, 8 times the
hypothesis profile's examples (800 with ``ci``, 80 with ``dev``; the Pod test, whose cases
cost more, 5 times): a few thousand cases for each oracle in all, about 40 s with ``ci``.
Or ``$KATA_MEM_ORACLE_EXAMPLES`` for every test (``scripts/oracle.sh`` runs 50,000).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Optional

from tests.strategies import examples
from tests.support.builds import build
from tests.support.paths import REPO

BUILD_SCRIPT = REPO / "scripts" / "build-oracles.sh"
#: The oracles: their name in the build script's output directory, and their program.
PROGRAMS = {
    "golang": "go-oracle",
    "kubernetes-1.37": "kubernetes-oracle",
    "kubernetes-1.35": "kubernetes-oracle",
}


def oracle_examples(times: float = 8) -> int:
    """Generated cases per property test: ``times`` the hypothesis profile's examples (8:
    800 with ``ci``; a test whose cases cost more asks for fewer), or
    ``$KATA_MEM_ORACLE_EXAMPLES`` for every test."""
    return int(os.environ.get("KATA_MEM_ORACLE_EXAMPLES") or examples(times))


ORACLE_EXAMPLES = oracle_examples()


class OracleError(Exception):
    """An oracle that could not be built, or that stopped answering."""


def oracle_dir() -> Path:
    return Path(os.environ.get("KATA_MEM_ORACLE_DIR") or REPO / ".cache" / "oracle")


def build_oracles() -> dict[str, Path]:
    """Build (or find built) every oracle; their programs by name.

    :raises OracleError: the build failed (its output says why: no Go, a module the proxy
        does not serve).
    """
    out = oracle_dir()
    failed = build(BUILD_SCRIPT, out)
    if failed is not None:
        raise OracleError(failed)
    return {name: out / name / "bin" / program for name, program in PROGRAMS.items()}


class Oracle:
    """One oracle process, asked a case at a time or many at once."""

    def __init__(self, program: Path) -> None:
        self.program = program
        self._proc = subprocess.Popen(
            [str(program)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            bufsize=1,
        )
        self.asked = 0

    def __enter__(self) -> Oracle:
        return self

    def __exit__(
        self,
        kind: Optional[type[BaseException]],
        value: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def _line(self, case: dict[str, Any]) -> str:
        # ensure_ascii: a lone surrogate travels as \udXXX, which Go's decoder reads as
        # U+FFFD, as it reads such an escape in an OCI spec or a manifest.
        return json.dumps(case, ensure_ascii=True) + "\n"

    def _answer(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            assert self._proc.stderr is not None
            raise OracleError(
                f"{self.program} stopped (exit {self._proc.wait()}): {self._proc.stderr.read()}"
            )
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, case: dict[str, Any]) -> dict[str, Any]:
        """Upstream's answer to one case."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(self._line(case))
        self._proc.stdin.flush()
        self.asked += 1
        return self._answer()

    def ask_many(self, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Upstream's answers to many cases, in order. A thread writes them while this one
        reads, so that neither pipe fills up with the other side waiting."""
        assert self._proc.stdin is not None
        stdin = self._proc.stdin
        text = "".join(self._line(case) for case in cases)

        def write() -> None:
            stdin.write(text)
            stdin.flush()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        answers = [self._answer() for _ in cases]
        writer.join()
        self.asked += len(cases)
        return answers

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        finally:
            if self._proc.poll() is None:
                self._proc.kill()
            for stream in (self._proc.stdout, self._proc.stderr):
                if stream is not None:
                    stream.close()


def go_float32(answer: dict[str, Any]) -> float:
    """The float32 of a go-oracle ``ParseFloat`` answer, from its bits."""
    return float(struct.unpack("<f", struct.pack("<I", int(answer["bits"])))[0])
