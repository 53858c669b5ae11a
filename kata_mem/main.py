"""Process entry point. ``kata-mem shim`` is dispatched before click is imported:
it runs on every container event and must start fast."""

from __future__ import annotations

import os
import sys
from typing import Optional

SHIM_HELP = """Usage: kata-mem shim < request.json

  Read one JSON request (schema kata-mem/shim-request/v1) on stdin and write one
  JSON response (kata-mem/shim-response/v1) on stdout; the exit code is the
  README's. The schemas are in schemas/ and the README's "Runtime-shim integration"."""


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["shim"]:
        if args[1:] in (["--help"], ["-h"]):
            print(SHIM_HELP)
            return 0
        if len(args) > 1:
            print(
                "usage: kata-mem shim < request.json  (takes no arguments; see --help)",
                file=sys.stderr,
            )
            return 2
        from kata_mem.shim import main as shim_main

        return shim_main(sys.stdin.buffer, sys.stdout, dict(os.environ))
    from kata_mem.cli import main as cli_main

    return cli_main(args)


def run() -> None:
    sys.exit(main())
