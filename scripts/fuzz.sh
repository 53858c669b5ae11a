#!/usr/bin/env bash
# The fuzz tests with many more examples than CI runs (CI: 1000 per test).
#   scripts/fuzz.sh [EXAMPLES]     default 20000 per test
set -euo pipefail
cd "$(dirname "$0")/.."
KATA_MEM_FUZZ_EXAMPLES=${1:-20000} exec "${VENV:-.venv}/bin/python" -m pytest -p no:cacheprovider -q tests/property/test_fuzz.py tests/property/test_quantity_properties.py
