#!/usr/bin/env bash
# The whole test suite, from a fresh Debian machine: installs everything the tests need
# (scripts/setup.sh --test, the three server flavors of the test bed), then lint, type checks and
# pytest. Extra arguments go to pytest, e.g. `scripts/test.sh -m "not server"` for the unit tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
export PATH="$PWD/.venv/bin:$PATH"
echo "== provisioning the test bed's servers"
python -m tests.servers.provision
echo "== ruff"
ruff check protocol replica sinks devtools tests bench
echo "== mypy --strict (protocol, sinks, replica, devtools, bench)"
mypy
echo "== pytest"
python -m pytest "$@"
