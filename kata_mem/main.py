"""Process entry point. ``kata-mem shim`` is dispatched before click is imported:
it runs on every container event and must start fast."""

from __future__ import annotations

import os
import sys
from typing import Optional

from kata_mem import logs

SHIM_HELP = """Usage: kata-mem [-v] [--log-format text|json] shim < request.json

  Read one JSON request (schema kata-mem/shim-request/v1) on stdin and write one
  JSON response (kata-mem/shim-response/v1) on stdout; the exit code is the
  README's. The schemas are in schemas/ and the README's "Runtime-shim integration"."""


def split_global_options(args: list[str]) -> tuple[int, Optional[str], list[str]]:
    """``-v``/``--verbose`` (counted) and ``--log-format`` taken out of ``args``
    wherever they are, for the shim, which runs without click. A missing value
    comes back as ``""``; the caller refuses it.
    """
    verbose, fmt, rest = 0, None, []
    it = iter(args)
    for arg in it:
        if arg == "--verbose" or (arg.startswith("-v") and set(arg[1:]) == {"v"}):
            verbose += 1 if arg == "--verbose" else len(arg) - 1
        elif arg == "--log-format":
            fmt = next(it, "")
        elif arg.startswith("--log-format="):
            fmt = arg.partition("=")[2]
        else:
            rest.append(arg)
    return verbose, fmt, rest


def _shim_usage(message: str) -> int:
    logs.emit(
        "error",
        f"{message} (usage: kata-mem [-v] [--log-format text|json] shim < request.json; see "
        "kata-mem shim --help)",
        logger="kata_mem.shim",
        prefix="kata-mem shim",
        kind="usage",
        exit_code=2,
    )
    return 2


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # Global options may come before or after the command. click handles them for
    # every other command; the shim, dispatched before click is imported, here.
    verbose, fmt, rest = split_global_options(args)
    if rest[:1] == ["shim"]:
        logs.set_format(fmt or "text")
        if fmt is not None and fmt not in logs.FORMATS:
            return _shim_usage(f"--log-format {fmt!r}: expected text or json")
        if verbose or fmt == "json":
            # Only when asked: the default shim path never imports logging.
            logs.setup_logging(verbose, fmt or "text")
        args = rest
    if args[:1] == ["shim"]:
        if args[1:] in (["--help"], ["-h"]):
            print(SHIM_HELP)
            return 0
        if len(args) > 1:
            return _shim_usage(f"unexpected argument {args[1]!r}")
        from kata_mem.shim import main as shim_main

        return shim_main(sys.stdin.buffer, sys.stdout, dict(os.environ))
    from kata_mem.cli import main as cli_main

    return cli_main(args)


def run() -> None:
    sys.exit(main())
