"""Where the repository and the test inputs are."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
KATA_CONFIGS = FIXTURES / "kata-configs"
PODS = REPO / "examples" / "pods"
