"""Arrow's allocator is a start-up step of whoever lands (``sinks.parquet.prefer_jemalloc``),
never a side effect of importing the sink. Each case runs in a fresh interpreter: Arrow reads
``ARROW_DEFAULT_MEMORY_POOL`` once, at pyarrow's first import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REPORT = ("import os, pyarrow as pa; "
          "print(pa.default_memory_pool().backend_name, os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))")


def _python(code: str, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items()
                   if k != "ARROW_DEFAULT_MEMORY_POOL" and not k.startswith("BINLAKE_")}
    environment.update(env, PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=environment, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_importing_the_sink_chooses_nothing() -> None:
    assert _python("import sinks.parquet, sinks.parquet.writer; " + REPORT) == "mimalloc None"


def test_prefer_jemalloc_before_pyarrow_sets_the_variable() -> None:
    code = ("import sys; from sinks.parquet import prefer_jemalloc; "
            "assert 'pyarrow' not in sys.modules; prefer_jemalloc(); " + REPORT)
    assert _python(code) == "jemalloc jemalloc"


def test_prefer_jemalloc_after_pyarrow_switches_the_pool() -> None:
    code = ("import pyarrow; from sinks.parquet import prefer_jemalloc; prefer_jemalloc(); "
            + REPORT)
    assert _python(code) == "jemalloc None"


def test_the_users_choice_wins() -> None:
    code = "from sinks.parquet import prefer_jemalloc; prefer_jemalloc(); " + REPORT
    assert _python(code, ARROW_DEFAULT_MEMORY_POOL="system") == "system system"


def test_binlake_run_chooses_before_pyarrow_is_imported() -> None:
    """`binlake run`'s start-up, before the daemon module (which imports pyarrow) loads."""
    code = ("import sys, types\n"
            "fake = types.ModuleType('replica.core.daemon')\n"
            "def run(config):\n"
            "    " + REPORT.replace("; ", "\n    ") + "\n"
            "fake.run = run\n"
            "sys.modules['replica.core.daemon'] = fake\n"
            "from replica import cli\n"
            "assert 'pyarrow' not in sys.modules\n"
            "cli.run(['run'])\n")
    assert _python(code, BINLAKE_REPLICA_SERVER_ID="7") == "jemalloc jemalloc"
    status = code.replace("'run'", "'status'").replace(
        "replica.core.daemon", "replica.commands.status")
    assert _python(status, BINLAKE_REPLICA_SERVER_ID="7") == "mimalloc None"  # reads only
