"""kata_mem/core/quantity.py and the quantities of kata_mem/core/manifest.py against
Kubernetes' own ``resource.ParseQuantity`` and ``Quantity.UnmarshalJSON``
(k8s.io/apimachinery at 1.35.4 and 1.37.2: tests/oracle/kubernetes): every text of length
three or less over the quantity's alphabet, then generated texts and JSON values
(tests/strategies.py), each decided by both, the exact value and the bytes compared.

The only differences allowed are the rows of docs/design/compared-with-kata.md
("Kubernetes", quantities) that ``documented`` names; anything else fails."""

from __future__ import annotations

import itertools
import re
from decimal import Decimal
from fractions import Fraction
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, given, settings

from kata_mem.core.errors import InputError, QuantityError
from kata_mem.core.manifest import kubernetes_quantity, load_documents
from kata_mem.core.quantity import parse_quantity, quantity_bytes
from kata_mem.core.units import INT64_MAX
from tests.strategies import quantity_json_values, quantity_texts
from tests.support.oracle import ORACLE_EXAMPLES, Oracle

# The first test of a session may build the oracles: minutes on a machine whose Go caches
# are cold (docs/contributing/tests.md, "Differential tests").
pytestmark = [pytest.mark.go, pytest.mark.oracle, pytest.mark.timeout(900)]

ORACLE = settings(
    max_examples=ORACLE_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

#: The characters of a quantity, and two that are not (every text of up to three of them
#: is decided by both: 5,460 texts).
ALPHABET = "015.+-eEiKMGmnk "
#: The number before the suffix, as apimachinery's parseQuantityString scans it.
_MANTISSA = re.compile(r"[+-]?([0-9]*)(?:\.([0-9]*))?")
_BINARY = re.compile(r".*[KMGTPE]i$")


def documented(text: str, ours: Optional[Fraction], go: dict[str, Any]) -> Optional[str]:
    """The row of compared-with-kata.md ("Kubernetes", quantities) that explains why
    kata-mem reads ``text`` as ``ours`` (None: refused) where Go answers ``go``, or None."""
    theirs = Fraction(Decimal(go["quantity"]["dec"])) if go["ok"] else None
    mantissa = _MANTISSA.match(text)
    digits = mantissa is not None and bool(mantissa[1] or mantissa[2])
    if ours is None and theirs == 0 and not digits:
        return "a quantity without a digit"  # ".", "+", "Mi", "e5": Go reads 0
    if ours is not None and theirs is not None:
        if abs(ours) == INT64_MAX + 1 and abs(theirs) == INT64_MAX and _BINARY.match(text):
            return "a binary quantity above int64"  # Go caps it at 2^63-1; kata-mem refuses it
        if abs(ours) == 10**40 and abs(theirs) >= 10**40:
            return "a quantity of 10^40 or more"  # kata-mem's readers refuse it as Go's would
    if ours is None and theirs is not None and re.search(r"[eE][+-]?[0-9]{10,}$", text):
        return "an exponent beyond int32"  # Go keeps int32(exponent): 1e4294967297 is 10
    return None


def _ours(text: str) -> Optional[Fraction]:
    try:
        return parse_quantity(text)
    except QuantityError:
        return None


def quantity_differences(text: str, go: dict[str, Any]) -> Optional[str]:
    """How kata-mem reads ``text`` differently from ``resource.ParseQuantity``: whether it
    is a quantity, its exact value, and its bytes (``Quantity.Value``: rounded up)."""
    ours = _ours(text)
    theirs = Fraction(Decimal(go["quantity"]["dec"])) if go["ok"] else None
    if ours != theirs:
        if documented(text, ours, go):
            return None
        return f"{text!r}: kata-mem {ours}, Go {theirs} {go.get('err', '')}"
    if ours is not None and 0 <= ours <= INT64_MAX:
        size = quantity_bytes(text)
        if size != int(go["quantity"]["value"]):
            return f"{text!r}: kata-mem {size} bytes, Go Value() {go['quantity']['value']}"
    return None


@pytest.mark.parametrize("release", ["1.35", "1.37"])
def test_every_short_text_is_read_as_kubernetes_reads_it(
    kubernetes_oracles: dict[str, Oracle], release: str
) -> None:
    texts = ["".join(chars) for n in range(1, 4) for chars in itertools.product(ALPHABET, repeat=n)]
    answers = kubernetes_oracles[release].ask_many(
        [{"op": "ParseQuantity", "text": t} for t in texts]
    )
    found = [quantity_differences(t, a) for t, a in zip(texts, answers, strict=True)]
    assert [f for f in found if f] == []
    assert sum(a["ok"] for a in answers) > 300  # both sides read many, not only refuse


@ORACLE
@given(quantity_texts())
def test_parse_quantity_is_kubernetes(kubernetes_oracles: dict[str, Oracle], text: str) -> None:
    for oracle in kubernetes_oracles.values():
        go = oracle.ask({"op": "ParseQuantity", "text": text})
        assert quantity_differences(text, go) is None


def _manifest_value(raw: str) -> Any:
    """A JSON value as kata-mem's manifest reader decodes it (the text of numbers and of
    escaped strings kept, as Kubernetes parses that text)."""
    return load_documents('{"v": ' + raw + "}", "case")[0]["v"]


@ORACLE
@given(quantity_json_values())
def test_a_manifests_quantity_is_read_as_kubernetes_reads_it(
    kubernetes_oracles: dict[str, Oracle], raw: str
) -> None:
    try:
        ours: Optional[Fraction] = kubernetes_quantity(_manifest_value(raw), "v")
    except (QuantityError, InputError):
        ours = None
    for oracle in kubernetes_oracles.values():
        go = oracle.ask({"op": "UnmarshalQuantity", "json": raw})
        theirs = Fraction(Decimal(go["quantity"]["dec"])) if go["ok"] else None
        if ours != theirs:
            text = raw[1:-1].strip() if raw.startswith('"') else raw
            assert documented(text, ours, go), f"{raw}: kata-mem {ours}, Go {theirs}"


def test_the_documented_quantity_differences_are_still_there(
    kubernetes_oracles: dict[str, Oracle],
) -> None:
    # compared-with-kata.md ("Kubernetes", quantities): each row, as it stands at each
    # release. When Kubernetes changes one, this fails: update the row.
    texts = {
        ".": "a quantity without a digit",
        "Mi": "a quantity without a digit",
        "8Ei": "a binary quantity above int64",
        "1e41": "a quantity of 10^40 or more",
        "1e4294967297": "an exponent beyond int32",
    }
    for oracle in kubernetes_oracles.values():
        answers = oracle.ask_many([{"op": "ParseQuantity", "text": t} for t in texts])
        got = {t: documented(t, _ours(t), a) for t, a in zip(texts, answers, strict=True)}
        assert got == texts
