"""``--metrics-address``: what it accepts and what it refuses (kata_mem.interfaces.listener)."""

from __future__ import annotations

import re

import pytest

from kata_mem.interfaces.listener import MetricsAddress


@pytest.mark.parametrize(
    ("text", "host", "port", "shown"),
    [
        ("9464", "127.0.0.1", 9464, "127.0.0.1:9464"),  # a port alone: loopback
        ("0", "127.0.0.1", 0, "127.0.0.1:0"),
        ("0.0.0.0:9464", "0.0.0.0", 9464, "0.0.0.0:9464"),
        ("10.1.2.3:65535", "10.1.2.3", 65535, "10.1.2.3:65535"),
        ("[::1]:9464", "::1", 9464, "[::1]:9464"),
        ("[::]:80", "::", 80, "[::]:80"),
    ],
)
def test_an_address_is_parsed(text: str, host: str, port: int, shown: str) -> None:
    address = MetricsAddress.parse(text)
    assert (address, str(address)) == (MetricsAddress(host, port), shown)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (":9464", "no host; give 127.0.0.1:9464 for loopback"),
        ("localhost:9464", "'localhost' is not an IP address"),
        ("::1:9464", "an IPv6 address goes in brackets"),  # or ::1:9464, no port?
        ("127.0.0.1:65536", "'65536' is not a port"),
        ("127.0.0.1:", "'' is not a port"),
        ("127.0.0.1:-1", "'-1' is not a port"),
        ("127.0.0.1:٩٤", "is not a port"),  # Arabic-Indic digits: isdigit, not ASCII
        ("port", "'port' is not a port"),
    ],
)
def test_a_bad_address_says_what_was_expected(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(repr(text))) as err:
        MetricsAddress.parse(text)
    assert says in str(err.value)
