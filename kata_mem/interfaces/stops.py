"""What SIGINT and SIGTERM do in a kata-mem process, and what they need to know: one
object, :data:`STOPS`.

``kata-mem`` installs it at its entry (:func:`kata_mem.interfaces.main.run`);
``kata-mem-shim`` (:mod:`~kata_mem.interfaces.shim_client`) installs it before it waits on
the service, and says through it when the service's answer is being written and when
kata-mem's own entry is being imported. This module imports only the C module of
``signal`` until a signal comes: ``kata-mem-shim`` imports it on its way to the service.
``kata-mem serve`` installs its own handlers (a graceful stop).
"""

from __future__ import annotations

# Not typing's, as kata_mem/__init__.py: kata-mem-shim's path does not import typing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
    from types import FrameType
    from typing import Optional
else:
    # The signal module wraps the C module's numbers in enums, and importing enum costs
    # kata-mem-shim more than all the rest of its own imports: the C module is all a
    # handler needs (as shim_client.py takes _socket for socket).
    import _signal


class Stops:
    """What a signal does now (:meth:`stop`), from what the process says it is doing."""

    def __init__(self) -> None:
        #: Whether this process is ``kata-mem shim``: a signal answers with its document.
        self.shim = False
        #: Whether a first signal is being answered: a second one (a runtime that sends
        #: SIGTERM twice) changes nothing, rather than run this again half way through the
        #: first (a traceback from an import cut short: issue 33, item 9).
        self.stopping = False
        #: ``kata-mem-shim`` is writing the service's answer: a signal lets it finish, as
        #: the shim does once its answer is on its way.
        self.answering = False
        #: ``kata-mem-shim`` is importing kata-mem's entry: a signal waits for it (this
        #: handler would import the same modules half way through), as :attr:`pending`.
        self.deferred = False
        self.pending: Optional[int] = None

    def install(self) -> None:
        _signal.signal(_signal.SIGINT, self.stop)
        _signal.signal(_signal.SIGTERM, self.stop)

    def resume(self) -> None:
        """kata-mem's entry is imported: a signal that came meanwhile is answered now."""
        self.deferred = False
        if self.pending is not None:
            self.stop(self.pending, None)

    def stop(self, signum: int, frame: Optional[FrameType]) -> None:
        """SIGINT (Ctrl-C) or SIGTERM: end the call where it is, as a kill would, once it
        is reported: one line on stderr and, for the shim, its error document on stdout,
        exit 130 or 143 (128 + the signal's number, as a shell reports it). Raising
        KeyboardInterrupt instead would unwind through qemu.qmp's event loop and the
        executor's ``finally`` blocks half way through a step (a traceback per coroutine
        left pending, asyncio's "Task was destroyed"); ending here leaves the journal as a
        kill does, which the next call or ``kata-mem reconcile`` settles from the
        hypervisor (docs/design/state.md). A shim whose answer is already on its way
        finishes it and exits with its code: the work is done."""
        if self.stopping or self.answering:
            return
        if self.deferred:
            if self.pending is None:
                self.pending = signum
            return
        self.stopping = True
        import json
        import os

        from kata_mem.core.errors import Interrupted, Terminated
        from kata_mem.edges import logs
        from kata_mem.interfaces import pipes

        if self.shim and pipes.stdout_used():
            return
        then = (
            "stopped where it was; a step cut short is settled from the VM by the next call "
            "on the sandbox or kata-mem reconcile"
        )
        error = (
            Terminated(f"terminated (SIGTERM): {then}")
            if signum == _signal.SIGTERM
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
        pipes.write_now(2, line + "\n")
        if shim:
            from kata_mem.interfaces.protocol import Answer

            pipes.write_now(1, json.dumps(Answer(error=error).document()) + "\n")
        os._exit(error.exit_code)


#: This process's.
STOPS = Stops()
