"""The ``kata-mem`` command line (click).

stdout carries only the result (text, or JSON with ``--json``); diagnostics go
to stderr. Every :class:`~kata_mem.core.errors.KataMemError` becomes one line on
stderr and its exit code; click's usage errors exit 2.

This module is the group and the run (:func:`run_cli`); the commands are in their
families' modules (``cli_plan``, ``cli_node``, ``cli_runtimeclass``), with what they share
in ``cli_options`` and the parameter types in ``cli_params``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

import click

from kata_mem.core.errors import KataMemError
from kata_mem.edges import logs
from kata_mem.interfaces import render
from kata_mem.interfaces.cli_node import COMMANDS as NODE_COMMANDS
from kata_mem.interfaces.cli_options import Asked, emit, global_options
from kata_mem.interfaces.cli_plan import COMMANDS as PLAN_COMMANDS
from kata_mem.interfaces.cli_runtimeclass import runtimeclass
from kata_mem.interfaces.pipes import ResultLost, lost


class _BrokenPipe(Exception):
    """A BrokenPipeError out of a command (a socket's: stdout's is a ResultLost), kept
    from click, which would answer it with a quiet exit 1 (``BaseCommand.main`` catches
    every EPIPE): it is a bug, reported as one."""


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            raise _BrokenPipe() from exc


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@global_options
@click.version_option(package_name="kata-mem")
def cli() -> None:
    """Size and resize the guest memory of Kata-style VM sandboxes.

    -v and --log-format may be given before or after the command."""


for _command in (*PLAN_COMMANDS, *NODE_COMMANDS, runtimeclass):
    cli.add_command(_command)


def _report(exc: KataMemError, as_json: bool) -> int:
    # A path that is not UTF-8 (an argument, a config.d entry) is carried as lone
    # surrogates, which would print as '\udcff': show the bytes as typed, \xff.
    exc.message = exc.message.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    logs.emit_error(exc)
    if as_json:
        emit(render.error_json(exc))
    return exc.exit_code


def run_cli(argv: Optional[list[str]] = None) -> int:
    """Run the CLI; return the process exit code (never raises for bad input).

    A stdout that does not take the result (``kata-mem preview ... | head -1``, a full
    disk) exits as the shim does (:func:`~kata_mem.interfaces.pipes.lost`).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _run(args)
    except ResultLost as exc:  # the result's, or an error document's
        return lost(exc)


def _run(args: list[str]) -> int:
    asked = Asked()
    # Until click has parsed the options (and for its own usage errors), report in
    # the format the command line asks for.
    logs.set_format(logs.split_global_options(args)[1] or "text")
    try:
        rv = cli.main(args=args, prog_name="kata-mem", standalone_mode=False, obj=asked)
    except KataMemError as exc:
        return _report(exc, asked.json)
    except click.exceptions.Abort:
        logs.emit("error", "aborted", kind="aborted", exit_code=130)
        return 130
    except click.ClickException as exc:
        if logs.current_format() == "json":
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "kata-mem"
            logs.emit(
                "error",
                f"{where}: {exc.format_message()} (see {where} --help)",
                kind="usage",
                exit_code=exc.exit_code,
            )
        else:
            exc.show()
        return exc.exit_code
    except _BrokenPipe as exc:
        assert isinstance(exc.__cause__, BrokenPipeError)
        return _internal_error(exc.__cause__)
    except ResultLost:
        raise
    except Exception as exc:  # a bug: say so briefly, with the traceback only on request
        return _internal_error(exc)
    return rv if isinstance(rv, int) else 0


def _internal_error(exc: Exception) -> int:
    if os.environ.get("KATA_MEM_DEBUG"):
        raise exc
    logs.emit(
        "error",
        f"internal error: {logs.describe(exc)} (a bug in kata-mem; set "
        "KATA_MEM_DEBUG=1 for the traceback)",
        kind="internal",
        exit_code=1,
    )
    return 1
