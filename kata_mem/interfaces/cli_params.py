"""The parameter types of the ``kata-mem`` command line: each checks a value as kata-mem
does (non-empty, UTF-8, ASCII digits, DNS names), so that its errors and exit codes stay
kata-mem's, not click's."""

from __future__ import annotations

import os
import re
from typing import Any, Optional

import click
from click.shell_completion import CompletionItem

from kata_mem.core.arch import GO_ARCH
from kata_mem.core.errors import InputError
from kata_mem.core.fields import integer_range
from kata_mem.core.units import INT64_MAX


def _utf8(value: str, param: Optional[click.Parameter], expected: str) -> str:
    """Refuse a value that is not UTF-8 (Python carries such arguments as lone surrogates):
    kata-mem keeps these values as JSON text (its journal, the shim protocol, --json)."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        name = "value" if param is None else param.human_readable_name
        if isinstance(param, click.Option):
            name = max(param.opts, key=len)
        raise InputError(
            f"{name} {os.fsencode(value)!r}: not valid UTF-8; expected {expected} in UTF-8"
        ) from exc
    return value


def _given(
    kind: click.ParamType[Any], value: Any, param: Optional[click.Parameter], ctx: Any
) -> None:
    """Refuse an empty value: it would silently mean the default (``--socket ""``
    binding the default socket), which is not what was written."""
    if value in ("", b""):
        kind.fail("an empty value; give one, or leave the option out for the default", param, ctx)


class Text(click.types.StringParamType):
    """A non-empty string that must be UTF-8; ``expected`` says what it is, for errors."""

    def __init__(self, expected: str = "text") -> None:
        self.expected = expected

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> str:
        _given(self, value, param, ctx)
        return _utf8(super().convert(value, param, ctx), param, self.expected)


#: Kubernetes' DNS-1123 label (k8s.io/apimachinery pkg/util/validation, IsDNS1123Label).
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class DnsName(Text):
    """A RuntimeClass name (a DNS-1123 subdomain) or handler (a DNS-1123 label), as the API
    server checks them (kubernetes pkg/apis/node/validation, ``ValidateRuntimeClass``:
    ``NameIsDNSSubdomain`` for the name, ``NameIsDNSLabel`` for the handler)."""

    def __init__(self, subdomain: bool) -> None:
        super().__init__("a DNS-1123 subdomain" if subdomain else "a DNS-1123 label")
        self.subdomain = subdomain

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> str:
        text = super().convert(value, param, ctx)
        labels = text.split(".") if self.subdomain else [text]
        if len(text) > (253 if self.subdomain else 63) or not all(
            DNS_LABEL.fullmatch(label) for label in labels
        ):
            what = "dot-separated labels" if self.subdomain else "a label"
            self.fail(
                f"{text!r}: expected {self.expected} (lowercase letters, digits and '-', "
                f"{what}, starting and ending with a letter or digit)",
                param,
                ctx,
            )
        return text


class Count(click.ParamType):  # type: ignore[type-arg]  # not generic in click 8.1
    """A whole number in ASCII digits from ``minimum`` to INT64_MAX, as a request's
    integers are: ``int()`` would also take a fullwidth digit (U+FF12), ``1_0`` and
    `` 2 ``, which no quantity option takes."""

    name = "integer"

    def __init__(self, minimum: int) -> None:
        self.minimum = minimum

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> int:
        _given(self, value, param, ctx)
        if isinstance(value, int) and self.minimum <= value <= INT64_MAX:
            return value
        expected = integer_range(self.minimum, INT64_MAX)
        text = _utf8(str(value), param, expected)
        if text.isascii() and text.isdigit() and self.minimum <= int(text) <= INT64_MAX:
            return int(text)
        self.fail(f"{text!r}: expected {expected}", param, ctx)


class Seconds(click.ParamType):  # type: ignore[type-arg]  # not generic in click 8.1
    """A number of seconds from ``minimum`` to ``maximum`` in ASCII decimal digits
    (``float()`` would also take ``nan``, which every range check lets through, and
    fullwidth digits)."""

    name = "seconds"

    def __init__(self, minimum: float, maximum: float) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> float:
        _given(self, value, param, ctx)
        expected = f"a number of seconds from {self.minimum:g} to {self.maximum:g}"
        text = _utf8(str(value), param, expected)
        if _DECIMAL.fullmatch(text) and self.minimum <= float(text) <= self.maximum:
            return float(text)
        self.fail(f"{text!r}: expected {expected}", param, ctx)


_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)


class ArchName(Text):
    """An architecture name (checked by :func:`normalize_arch`, exit 4); the shell
    completes the names kata-mem knows."""

    def __init__(self) -> None:
        super().__init__("an architecture name")

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        return [CompletionItem(name) for name in GO_ARCH if name.startswith(incomplete)]


class FileName(click.Path):
    """A non-empty file or directory name: the shell completes it, kata-mem checks it
    (click's own checks are off, so that the errors and exit codes stay kata-mem's).

    ``absolute``: made absolute against the current directory, for a path the sandbox's
    saved request keeps (``reconcile``, ``serve`` and timers run from other directories,
    where a relative one names something else, or nothing), as ``os.path.abspath`` makes
    the saved configuration path.
    """

    def __init__(
        self, *, directory: bool = False, absolute: bool = False, path_type: Any = None
    ) -> None:
        super().__init__(exists=False, file_okay=not directory, path_type=path_type)
        self.absolute = absolute

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> Any:
        _given(self, value, param, ctx)
        name = _utf8(value, param, "a path")
        return self.coerce_path_result(os.path.abspath(name) if self.absolute else name)


class MetricsAddressParam(Text):
    """``--metrics-address``: ``PORT`` or ``HOST:PORT`` (exit 2 naming what was expected)."""

    name = "address"

    def __init__(self) -> None:
        super().__init__("an address")

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Any) -> Any:
        from kata_mem.interfaces.listener import MetricsAddress

        if isinstance(value, MetricsAddress):
            return value
        try:
            return MetricsAddress.parse(super().convert(value, param, ctx))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
