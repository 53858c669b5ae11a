"""The kata-mem error tree.

Every error that kata-mem raises on purpose is a :class:`KataMemError`; anything
else escaping the package is a bug (exit code 1). Each class carries the exit
code the CLI and the shim use::

    KataMemError                 1  unexpected / internal
     +-- ConfigError             3  configuration file, key or value
     +-- InputError              4  pod, OCI spec, quantity, request
     |    +-- QuantityError      4  a Kubernetes quantity that does not parse
     +-- BackendUnavailable      6  socket/URI missing, connection refused
     +-- BackendError            7  the hypervisor refused or failed a command
     |    +-- BackendUnsupported 7  the hypervisor cannot do this at all (e.g. VIR_ERR_NO_SUPPORT)
     +-- MissingDependency       9  a Python library kata-mem needs is not installed
     +-- Interrupted           130  SIGINT (Ctrl-C) ended the call
          +-- Terminated       143  SIGTERM ended the call

Three exit codes have no class. 2 is click's usage error. 8 (the guest did not
complete in time) is an outcome, not an error: the call ends normally with
``InProgress`` / ``PlugTimeout`` or ``UnplugTimeout``, and
:func:`kata_mem.core.results.outcome_exit_code` gives it its code. 5 is not used: what policy refuses is an ``Infeasible``
outcome (exit 0). Codes 7 and 8 mean state may have changed; the next call
reconciles it from the hypervisor.
"""

from __future__ import annotations

from typing import Optional, TypeVar


class KataMemError(Exception):
    """Root of every error kata-mem raises on purpose."""

    exit_code = 1
    kind = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class ConfigError(KataMemError):
    """A configuration file is missing, unreadable, or has a bad key or value."""

    exit_code = 3
    kind = "config"


class InputError(KataMemError):
    """A pod manifest, OCI spec, request or command-line value is invalid."""

    exit_code = 4
    kind = "input"


class QuantityError(InputError):
    """A Kubernetes resource quantity does not follow the apimachinery grammar."""

    kind = "quantity"


class BackendUnavailable(KataMemError):
    """The hypervisor endpoint cannot be reached (missing socket, refused, wrong URI).

    ``gone`` is True when the VM itself no longer exists (its socket is missing
    or refuses connections, or libvirt has no such domain), as opposed to a
    daemon that is down for now; ``kata-mem reconcile`` cleans up after the former.
    ``other_vmm`` says what differs when the endpoint leads to another VMM than the
    ``backend.vmm`` it names: from a saved request, its VM is gone; given by a shim, the
    shim's field is wrong (:func:`kata_mem.interfaces.protocol.answer`).
    """

    exit_code = 6
    kind = "backend-unavailable"

    def __init__(self, message: str, gone: bool = False, other_vmm: Optional[str] = None) -> None:
        super().__init__(message)
        self.gone = gone
        self.other_vmm = other_vmm


_Backend = TypeVar("_Backend", bound="BackendError")


class BackendError(KataMemError):
    """The hypervisor answered a command with an error.

    ``error_class`` keeps the hypervisor's own classification (a QMP error class
    such as ``GenericError``, or a libvirt error code name) so that callers and
    users can tell refusals apart without parsing ``message``.

    ``message`` is what the CLI prints. Made by the constructor, it is the description
    alone; made by :meth:`naming`, it names the class itself (``names_class``), as the
    QMP and libvirt backends word their errors. :attr:`with_class` is the text a step's
    outcome reports: the class always, once, decided by that flag, never by the text.
    """

    exit_code = 7
    kind = "backend"

    def __init__(self, message: str, error_class: str = "") -> None:
        super().__init__(message)
        self.error_class = error_class
        #: Whether ``message`` already says ``error_class``: set only by :meth:`naming`.
        self.names_class = False

    @classmethod
    def naming(cls: type[_Backend], where: str, error_class: str, description: str) -> _Backend:
        """The error whose message is ``<where>: <error_class>: <description>``."""
        made = cls(f"{where}: {error_class}: {description}", error_class)
        made.names_class = True
        return made

    @property
    def with_class(self) -> str:
        """The message with its error class: as it is when it names it, else
        ``<error_class>: <message>`` (a backend that words its errors as the hypervisor
        describes them, such as the fake one)."""
        if self.error_class and not self.names_class:
            return f"{self.error_class}: {self.message}"
        return self.message


class BackendUnsupported(BackendError):
    """The hypervisor or its driver lacks the operation (libvirt ``VIR_ERR_NO_SUPPORT``).

    Not transient: a step that meets it is reported Infeasible, not retried.
    """

    kind = "backend-unsupported"


class MissingDependency(KataMemError):
    """A library that the requested work needs is not installed (for example
    libvirt-python, which only the ``kata-mem[libvirt]`` extra brings).

    Not bad input: the same request works once the library is installed, and
    the message says how to install it.
    """

    exit_code = 9
    kind = "missing-dependency"


class Interrupted(KataMemError):
    """SIGINT (Ctrl-C) ended the call where it was, as SIGTERM or a kill would: the
    journal is written before each command and updated after it, so the next call on the
    sandbox (or ``kata-mem reconcile``) settles a step cut short from the hypervisor.

    130 is what a shell reports for a command SIGINT ends (128 + 2), so a script sees
    the same code whether kata-mem or the shell reports it.
    """

    exit_code = 130
    kind = "interrupted"


class Terminated(Interrupted):
    """SIGTERM, what an orchestrator (systemd, the kubelet, a runtime ending its shim)
    sends, ended the call: handled as SIGINT is, with the shell's code for it (128 +
    15), so that it is reported rather than ending the call silently."""

    exit_code = 143
    kind = "terminated"


#: The exit code of an outcome whose guest did not confirm a step in time.
GUEST_TIMEOUT_EXIT = 8
