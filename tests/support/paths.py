"""Where the repository and the test inputs are."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
KATA_CONFIGS = FIXTURES / "kata-configs"
PODS = REPO / "examples" / "pods"
DOCS = REPO / "docs"


def doc(page: str) -> str:
    """One page of the documentation (``docs/PAGE``), as the site shows it."""
    return (DOCS / page).read_text()
