#!/usr/bin/env bash
# The differential tests (tests/oracle) with many more generated cases than CI runs (CI:
# 800 per test, the Pod test 500): upstream's own code (Go's strconv and regexp,
# Kubernetes 1.35 and 1.37) beside kata-mem's, on inputs nobody chose by hand.
#   scripts/oracle.sh [EXAMPLES]     default 50000 per test
# Measured on this 2-core machine at a load average of 4-5 (2026-12-07): 20,000 per test,
# 9 minutes in all; 50,000 takes about two and a half times that.
set -euo pipefail
cd "$(dirname "$0")/.."
KATA_MEM_ORACLE_EXAMPLES=${1:-50000} exec "${VENV:-.venv}/bin/python" -m pytest -p no:cacheprovider -q tests/oracle
