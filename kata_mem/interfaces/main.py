"""Process entry point. ``kata-mem shim`` is dispatched before click is imported:
it runs on every container event and must start fast."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, NoReturn, Optional

from kata_mem.edges import logs
from kata_mem.interfaces.pipes import ResultLost, flush, lost, own_stdio, stdout_used, write_now

if TYPE_CHECKING:
    from kata_mem.core.errors import KataMemError

#: Where the JSON Schemas of the shim protocol are installed (package data).
SCHEMA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "schemas")
SHIM_SCHEMAS = {"request": "shim-request.v1.json", "response": "shim-response.v1.json"}
SHIM_USAGE = (
    "kata-mem [-v] [--log-format text|json] shim < request.json\n"
    "       kata-mem shim --print-schema request|response"
)
SHIM_HELP = f"""Usage: {SHIM_USAGE}

  Read one JSON request (schema kata-mem/shim-request/v1) on stdin and write one
  JSON response (kata-mem/shim-response/v1) on stdout; the exit code is the
  documented one (docs: "Runtime-shim integration" and "Exit codes").

Options:
  --print-schema request|response  Print that JSON Schema on stdout and exit.
  -h, --help                       Show this message and exit.

The JSON Schemas are installed in {SCHEMA_DIR}{os.sep}
({", ".join(SHIM_SCHEMAS.values())})."""


def _print_schema(args: list[str]) -> int:
    """``kata-mem shim --print-schema NAME`` (or ``--print-schema=NAME``)."""
    option, eq, name = args[0].partition("=")
    given, extra = ([name], args[1:]) if eq else (args[1:2], args[2:])
    if given[:1] not in (["request"], ["response"]) or extra:
        got = " ".join(repr(arg) for arg in given + extra) or "nothing"
        return _shim_usage(f"{option} expects one name, request or response; got {got}")
    with open(os.path.join(SCHEMA_DIR, SHIM_SCHEMAS[given[0]]), encoding="utf-8") as schema:
        return _print(schema.read())


def _print(text: str) -> int:
    """Write ``text`` on stdout; the exit code (:func:`~kata_mem.interfaces.pipes.lost`
    when stdout did not take it)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except ResultLost as exc:
        return lost(exc)
    return 0


def _shim_usage(message: str) -> int:
    logs.emit(
        "error",
        f"{message} (see kata-mem shim --help)",
        logger="kata_mem.shim",
        prefix="kata-mem shim",
        kind="usage",
        exit_code=2,
    )
    return 2


class Stops:
    """What SIGINT and SIGTERM do in this process, and what they need to know: one object,
    installed by :func:`run` (``kata-mem-shim`` calls :meth:`stop` from its own handler)."""

    def __init__(self) -> None:
        #: Whether this process is ``kata-mem shim``: a signal answers with its document.
        self.shim = False
        #: Whether a first signal is being answered: a second one (a runtime that sends
        #: SIGTERM twice) changes nothing, rather than run this again half way through the
        #: first (a traceback from an import cut short: issue 33, item 9).
        self.stopping = False

    def install(self) -> None:
        signal.signal(signal.SIGINT, self.stop)
        signal.signal(signal.SIGTERM, self.stop)

    def stop(self, signum: int, frame: Optional[FrameType]) -> None:
        """SIGINT (Ctrl-C) or SIGTERM: end the call where it is, as a kill would, once it
        is reported: one line on stderr and, for the shim, its error document on stdout,
        exit 130 or 143 (128 + the signal's number, as a shell reports it). Raising
        KeyboardInterrupt instead would unwind through qemu.qmp's event loop and the
        executor's ``finally`` blocks half way through a step (a traceback per coroutine
        left pending, asyncio's "Task was destroyed"); ending here leaves the journal as a
        kill does, which the next call or ``kata-mem reconcile`` settles from the
        hypervisor (docs/design/state.md). A shim whose answer is already on its way
        finishes it and exits with its code: the work is done. ``kata-mem serve`` installs
        its own handlers (a graceful stop)."""
        if self.stopping:
            return
        self.stopping = True
        from kata_mem.core.errors import Interrupted, Terminated

        if self.shim and stdout_used():
            return
        then = (
            "stopped where it was; a step cut short is settled from the VM by the next call "
            "on the sandbox or kata-mem reconcile"
        )
        error = (
            Terminated(f"terminated (SIGTERM): {then}")
            if signum == signal.SIGTERM
            else Interrupted(f"interrupted (SIGINT): {then}")
        )
        shim = self.shim
        logger, prefix = ("kata_mem.shim", "kata-mem shim") if shim else ("kata_mem", "kata-mem")
        line = logs.line(
            "error",
            error.message,
            logger=logger,
            prefix=prefix,
            kind=error.kind,
            exit_code=error.exit_code,
        )
        write_now(2, line + "\n")
        if shim:
            from kata_mem.interfaces.protocol import Answer

            write_now(1, json.dumps(Answer(error=error).document()) + "\n")
        os._exit(error.exit_code)


#: This process's.
STOPS = Stops()


def main(
    argv: Optional[list[str]] = None,
    stdin: Optional[bytes] = None,
    *,
    service: Optional[str] = None,
    refusal: Optional[KataMemError] = None,
) -> int:
    """``kata-mem ARGV``. For the shim: its request in ``stdin`` when it was read already
    (else it reads its own), and, from ``kata-mem-shim``, the socket of the service it
    answers for (``service``) or the error that refuses it (``refusal``): see
    :func:`~kata_mem.interfaces.shim.run_shim`."""
    args = sys.argv[1:] if argv is None else argv
    # Global options may come before or after the command. click handles them for
    # every other command; the shim, dispatched before click is imported, here.
    verbose, fmt, rest = logs.split_global_options(args)
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
            return _print(SHIM_HELP + "\n")
        if args[1:] and args[1].partition("=")[0] == "--print-schema":
            return _print_schema(args[1:])
        if len(args) > 1:
            return _shim_usage(f"unexpected argument {args[1]!r}; a request goes on stdin")
        STOPS.shim = True
        from kata_mem.interfaces.shim import run_shim

        request = sys.stdin.buffer if stdin is None else io.BytesIO(stdin)
        env = dict(os.environ)
        return run_shim(request, sys.stdout, env, service=service, refusal=refusal)
    from kata_mem.interfaces.cli import run_cli

    return run_cli(args)


def run(
    argv: Optional[list[str]] = None,
    stdin: Optional[bytes] = None,
    *,
    service: Optional[str] = None,
    refusal: Optional[KataMemError] = None,
) -> NoReturn:
    """The ``kata-mem`` process: SIGINT and SIGTERM (:data:`STOPS`), stdin, stdout and
    stderr as kata-mem needs them (:func:`~kata_mem.interfaces.pipes.own_stdio`), then
    :func:`main` with the same arguments."""
    STOPS.install()
    own_stdio()
    code = main(argv, stdin, service=service, refusal=refusal)
    sys.exit(flush() or code)
