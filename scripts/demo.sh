#!/usr/bin/env bash
# The main job on the embedded default: installs what is missing (scripts/setup.sh), then
# `binlake demo` starts a sandbox MariaDB on loopback with a sample database that has rows before
# binlake starts, snapshots them and streams the changes that follow into a Parquet lake under
# ./demo-lake, and reads the lake back with Spark.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/binlake demo --lake "${BINLAKE_DEMO_LAKE:-$PWD/demo-lake}" "$@"
