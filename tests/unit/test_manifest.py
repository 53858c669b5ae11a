"""Numbers in Pod manifests mean what they mean to Kubernetes.

Each row gives a limit as written in a real manifest file and the quantity Kubernetes
decodes from it, or REFUSED where Kubernetes refuses the manifest. How Kubernetes gets
there, with the sources the rows follow:

- YAML goes through sigs.k8s.io/yaml ``yamlToJSON`` (yaml.go): go-yaml v2 decodes the
  document into Go values (go.yaml.in/yaml/v2 v2.4.2 ``resolve.go``; the v1.4.0 fork
  ``sigs.k8s.io/yaml/goyaml.v2`` is v2.4.0 with the same ``resolve``), then
  ``json.Marshal`` writes them out: a float64 as its shortest digits (encoding/json
  ``floatEncoder``), +Inf/NaN as an error ("json: unsupported value"), a string with
  control characters and ``<>&`` escaped.
- go-yaml v2 ``resolve``: ``y/yes/on/true`` and ``n/no/off/false`` are booleans,
  ``~/null/""`` null, ``.inf/.nan`` floats; text starting with a digit or sign is an int
  if ``strconv.ParseInt(s, 0, 64)`` (after removing ``_``; base prefixes 0x, 0o, 0b, 0)
  or ``ParseUint`` reads it, else a float if it matches ``yamlStyleFloat`` and
  ``ParseFloat`` reads it in range; text starting with ``.`` a float if ``ParseFloat``
  reads it. No base-60: ``12:30`` is a string. A timestamp decoded into ``interface{}``
  stays its string (decode.go).
- apimachinery ``pkg/api/resource/quantity.go`` ``Quantity.UnmarshalJSON``: ``null`` is
  zero; a string's quotes are cut off *without* unescaping; ``strings.TrimSpace``; then
  ``ParseQuantity`` of that text. So a JSON manifest's numbers are parsed from their
  text as written, and a JSON string with an escape is no quantity.
"""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Optional

import pytest
import yaml

from kata_mem.core.errors import InputError
from kata_mem.core.manifest import go_json_float, go_yaml_scalar
from kata_mem.core.units import INT64_MAX
from kata_mem.edges.pod import read_pod
from tests.support.paths import REPO

REFUSED = None
F = Fraction


def _yaml_pod(field: str, scalar: str) -> str:
    return (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: t}\nspec:\n  containers:\n  - name: c\n"
        f"    resources:\n      limits:\n        {field}: {scalar}\n"
    )


def _json_pod(field: str, value: str) -> str:
    return (
        '{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"}, "spec": {"containers":'
        f' [{{"name": "c", "resources": {{"limits": {{"{field}": {value}}}}}}}]}}}}\n'
    )


def _cpu(path: Path) -> Optional[Fraction]:
    try:
        (container,) = read_pod(path, "amd64")
    except InputError:
        return REFUSED
    return container.cpu


# (the scalar as written in YAML, the CPUs Kubernetes reads, why)
YAML_CPU = [
    ("0.5", F(1, 2), "float 0.5, JSON 0.5"),
    ("2.5", F(5, 2), "float"),
    (".5", F(1, 2), "starts with '.': ParseFloat"),
    ("+.5", F(1, 2), "yamlStyleFloat allows a sign"),
    ("1.", F(1), "yamlStyleFloat allows a bare point; JSON 1"),
    ("1e3", F(1000), "float (PyYAML would say string; same value)"),
    ("1.5E3", F(1500), "float"),
    (
        "1e-10",
        F(1, 1000),
        "float, JSON 1e-10, below 1n: 1n, stored as 1m (SetDefaults_ResourceList)",
    ),
    ("1e-400", F(0), "ParseFloat underflows to 0 without error: JSON 0"),
    ("0.1", F(1, 10), "JSON writes the shortest digits, 0.1, not the binary expansion"),
    ("12:30", REFUSED, "no base-60 in go-yaml v2: the string '12:30' (PyYAML: 750)"),
    ("1:30.5", REFUSED, "no base-60 floats either"),
    ("0x10", F(16), "ParseInt base 0: hex"),
    ("0o10", F(8), "ParseInt base 0: 0o octal (PyYAML: the string '0o10')"),
    ("010", F(8), "ParseInt base 0: a leading 0 is octal"),
    ("08", F(8), "not octal, so not an int; yamlStyleFloat: the float 8"),
    ("0b101", F(5), "ParseInt base 0: binary"),
    ("1_000", F(1000), "underscores are removed first"),
    ("+5", F(5), "ParseInt takes a sign"),
    ("-1", REFUSED, "an int; negative limits fail validation"),
    ("18446744073709551615", F(2**64 - 1), "ParseUint: uint64"),
    ("123456789012345678901234567", F(123456789012345680000000000), "float64, shortest digits"),
    ("1e400", F(10**40), "ParseFloat overflows (ErrRange): the string '1e400', a quantity"),
    ("0x10000000000000000", REFUSED, "too big for 64 bits and no float: a string, no quantity"),
    (".inf", REFUSED, "+Inf: json.Marshal fails, the manifest is refused"),
    ("-.Inf", REFUSED, "-Inf"),
    (".nan", REFUSED, "NaN"),
    ("yes", REFUSED, "the boolean true"),
    ("on", REFUSED, "the boolean true"),
    ("n", REFUSED, "the boolean false"),
    ("~", F(0), "null: a zero quantity"),
    ("null", F(0), "null"),
    ("", F(0), "empty plain scalar: null"),
    ("2001-12-14", REFUSED, "a timestamp stays its string: no quantity"),
    ("500m", F(1, 2), "a string: ParseQuantity"),
    ('"0.5"', F(1, 2), "quoted: the string 0.5"),
    ('" 2 "', F(2), "UnmarshalJSON trims white space"),
    ('"\\t2"', REFUSED, "json.Marshal writes the tab as \\t, which is not trimmed"),
    ("!!float 1", F(1), "an explicit tag: the int 1 as a float"),
    ("!!int 1.5", REFUSED, "go-yaml: cannot decode !!float as !!int"),
    ("!!binary Mi41", F(5, 2), "base64 of '2.5', decoded to a string"),
    ("!local 3", F(3), "a tag go-yaml does not know: the text '3'"),
    ("[1]", REFUSED, "ParseQuantity of [1]"),
]


@pytest.mark.parametrize(("scalar", "cpus", "why"), YAML_CPU, ids=[r[0] for r in YAML_CPU])
def test_yaml_numbers_mean_what_kubernetes_reads(
    tmp_path: Path, scalar: str, cpus: Optional[Fraction], why: str
) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(_yaml_pod("cpu", scalar))
    assert _cpu(path) == cpus, why


# (the value as written in JSON, the CPUs Kubernetes reads, why)
JSON_CPU = [
    ("0.5", F(1, 2), "the number's text, 0.5"),
    ("2.5", F(5, 2), ""),
    ("1E+3", F(1000), "the text 1E+3: ParseQuantity reads the exponent"),
    ("1e-999", F(1, 1000), "the text, not a float64: 1n, stored as 1m (YAML: 0)"),
    (
        "0.1000000000000000000001",
        F(101, 1000),
        "the text, stored rounded up to 1m (YAML, a float: 0.1)",
    ),
    ("123456789012345678901234567", F(123456789012345678901234567), "exact"),
    ("-0", F(0), ""),
    ('"0.5"', F(1, 2), ""),
    ('" 2 "', F(2), "trimmed"),
    ('"\\u0032"', REFUSED, "the escape reaches ParseQuantity as written"),
    ("null", F(0), "null: a zero quantity"),
    ("true", REFUSED, ""),
    ("NaN", REFUSED, "not JSON"),
    ("[0.5]", REFUSED, ""),
]


@pytest.mark.parametrize(("value", "cpus", "why"), JSON_CPU, ids=[r[0] for r in JSON_CPU])
def test_json_numbers_mean_what_kubernetes_reads(
    tmp_path: Path, value: str, cpus: Optional[Fraction], why: str
) -> None:
    path = tmp_path / "pod.json"
    path.write_text(_json_pod("cpu", value))
    assert _cpu(path) == cpus, why


@pytest.mark.parametrize(
    ("scalar", "size"),
    [
        ("1.5", 2),  # 1.5 bytes: Quantity.Value() rounds up
        ("1e3", 1000),
        ("0.5", 1),
        ("1.5Gi", 3 << 29),
        ("18446744073709551615", INT64_MAX),  # binary sizes cap at 2^63-1
        ("1e400", INT64_MAX),
        ("1" * 5000, INT64_MAX),  # longer than Python's int() takes
    ],
)
def test_yaml_memory_in_bytes(tmp_path: Path, scalar: str, size: int) -> None:
    path = tmp_path / "pod.yaml"
    path.write_text(_yaml_pod("memory", scalar))
    (container,) = read_pod(path, "amd64")
    assert container.memory_limit == size


def test_refusals_say_why(tmp_path: Path) -> None:
    for scalar, needle in [
        ("12:30", "base-60"),
        ("yes", "boolean"),
        (".inf", "infinite or NaN"),
        ('"\\t2"', "escapes and all"),
    ]:
        path = tmp_path / "pod.yaml"
        path.write_text(_yaml_pod("memory", scalar))
        with pytest.raises(InputError, match=needle) as info:
            read_pod(path, "amd64")
        assert "spec.containers[0].resources.limits.memory" in str(info.value)


@pytest.mark.parametrize(
    ("number", "text"),
    [  # Go: json.Marshal(float64(x))
        (0.5, "0.5"),
        (2.0, "2"),
        (100.0, "100"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (1.2345678901234568e26, "1.2345678901234568e+26"),
        (-0.0, "-0"),
        (0.1 + 0.2, "0.30000000000000004"),
    ],
)
def test_go_json_float(number: float, text: str) -> None:
    assert go_json_float(number) == text


def test_go_yaml_scalar_types() -> None:
    assert go_yaml_scalar("-9223372036854775808") == -(2**63)  # int64
    assert go_yaml_scalar("-9223372036854775809") == -9.223372036854776e18  # float
    assert go_yaml_scalar("0b-101") == -5  # resolve.go's second look at "0b"
    assert go_yaml_scalar(".5_0") == 0.5 and go_yaml_scalar("._5") == "._5"
    assert go_yaml_scalar("<<") == "<<" and go_yaml_scalar("Yes") is True


# --- A key given twice, with either YAML loader ----------------------------------------------

_TWICE = "kind: Pod\nspec:\n  containers:\n  - name: c\n    resources:\n      limits:\n" + (
    "        memory: 1Gi\n        memory: 2Gi\n"
)


@pytest.mark.parametrize("loader", ["C", "Python"])
def test_a_key_given_twice_is_refused_by_either_loader(tmp_path: Path, loader: str) -> None:
    """Before: PyYAML kept the last value (2Gi) in silence. The loader is chosen when
    kata_mem.core.manifest is imported, so each runs in its own process; "Python" is PyYAML
    without libyaml, as on a machine where it was built without it."""
    if loader == "C" and not yaml.__with_libyaml__:
        pytest.skip("PyYAML built without libyaml")
    pod = tmp_path / "pod.yaml"
    pod.write_text(_TWICE)
    code = (
        "import sys, yaml\n"
        + ("del yaml.CSafeLoader\n" if loader == "Python" else "")
        + "from kata_mem.core import manifest\n"
        "from kata_mem.core.errors import InputError\n"
        "from kata_mem.edges.pod import read_pod\n"
        f"assert (yaml.SafeLoader in manifest.GoYamlLoader.__mro__) == {loader == 'Python'}\n"
        "try:\n"
        f"    read_pod(__import__('pathlib').Path({str(pod)!r}), 'amd64')\n"
        "except InputError as exc:\n"
        "    print(exc)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert (
        f'{pod}: invalid YAML/JSON: line 8: the key "memory" is given more than once in one '
        "mapping (first on line 7)"
    ) in r.stdout, r.stdout


def test_keys_a_merge_brings_may_be_overridden(tmp_path: Path) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        _yaml_pod("memory", "1Gi").replace("limits:\n", "limits:\n        <<: {memory: 3Gi}\n")
    )
    (container,) = read_pod(pod, "amd64")
    assert container.memory_limit == 1 << 30
