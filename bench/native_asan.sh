#!/usr/bin/env bash
# The native extensions under AddressSanitizer and UndefinedBehaviorSanitizer: builds them
# with both into a scratch copy of the checkout (never over the in-place build) and runs the
# differential tests' fuzz loops there (values and Arrow chunks of the rows decoder, the
# text-row bulk parser's columns, a snapshot's kept
# text rows into Arrow chunks and the bulk copy that keeps them), ROUNDS corrupted events /
# result sets / random row events each (default 3000); and the slot filler's instances
# (protocol/_native_slots.c, tests/unit/test_native_slots.py); and the sum of an event's Arrow buffers
# (arrow_bytes, tests/unit/test_sink_memory_budget.py); a batch's columns gathered at once and
# its metadata columns filled (gather_all, meta_columns: tests/unit/test_batch_fast_path.py);
# and a dump's framing in C (protocol/_native_frames.c: packets split, plain events framed,
# the session's positions; tests/unit/test_native_frames.py, test_packets.py, test_session.py); the
# small-file Parquet writer's random tables and damaged templates, and its pool of writer threads
# (sinks/parquet/_native_parquet.c, tests/unit/test_native_parquet.py).
#   bench/native_asan.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
git ls-files -co --exclude-standard | grep -v '\.so$' | tar -cf - -T - | tar -xf - -C "$scratch"
cd "$scratch"
CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
LDFLAGS="-fsanitize=address,undefined" "$python" setup.py -q build_ext --inplace
export PYTHONPATH="$scratch" BINLAKE_NATIVE_FUZZ_ROUNDS="${1:-3000}" CI=true
export ASAN_OPTIONS=detect_leaks=0  # the interpreter's own allocations are not ours
LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
  "$python" -m pytest -q -p no:cacheprovider tests/unit/test_native_rows.py tests/unit/test_native_arrow.py \
    tests/unit/test_text_rows.py \
    tests/unit/test_snapshot_arrow.py tests/unit/test_native_slots.py \
    tests/unit/test_sink_memory_budget.py tests/unit/test_batch_fast_path.py \
    tests/unit/test_native_frames.py tests/unit/test_packets.py tests/unit/test_session.py \
    tests/unit/test_native_parquet.py tests/unit/test_value_types.py
