"""Process entry point. The shim path is dispatched before click is imported:
it runs on every container event and must start fast."""

from __future__ import annotations

import sys
from typing import Optional


def main(argv: Optional[list[str]] = None) -> int:
    from kata_mem.cli import main as cli_main

    return cli_main(argv)


def run() -> None:
    sys.exit(main())
