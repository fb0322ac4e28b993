"""Where binlake's decode path spends its time: cProfile, and py-spy when it is available.

cProfile gives exact call counts but merges the generated per-table row decoders (every
TABLE_MAP compiles one with the same name and "file"), and its overhead inflates small
functions. py-spy samples the unmodified process and attributes time to source lines, the
generated decoders included, so both are written when py-spy is in the bench cache venv
(``pip install py-spy`` there; ``python -m bench --setup`` tries it).
"""

from __future__ import annotations

import collections
import os
import pstats
import re
import subprocess
from pathlib import Path

from .measure import run_measured
from .pmr_venv import pmr_python

__all__ = ["profile_decode", "py_spy_path", "summarize_collapsed"]

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def py_spy_path() -> Path | None:
    candidate = pmr_python().parent / "py-spy"
    return candidate if candidate.exists() else None


def summarize_collapsed(text: str, top: int = 25) -> str:
    """Self and total time per function from py-spy's raw (collapsed stacks) output."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        samples += count
        names = []
        for frame in stack.split(";"):
            match = _FRAME.match(frame)
            if match is None:
                names.append(frame)
                continue
            file = match["file"]
            file = file.split("/work/main/")[-1] if "/work/main/" in file else os.path.basename(file)
            names.append(f"{match['func']} ({file})")
        own[names[-1]] += count
        for name in set(names):
            total[name] += count
    if not samples:
        return "py-spy: no samples\n"
    lines = [f"py-spy: {samples} samples", "", "self %   total %  function"]
    for name, count in own.most_common(top):
        lines.append(f"{100 * count / samples:6.1f}  {100 * total[name] / samples:7.1f}  {name}")
    return "\n".join(lines) + "\n"


def profile_decode(reader_argv: list[str], env: dict[str, str], out_dir: Path,
                   stamp: str) -> str:
    """Profile ``python -m bench.binlake_reader decode …`` (``reader_argv``); returns the path
    of the text summary."""
    text_path = out_dir / f"profile-{stamp}.txt"
    prof = out_dir / f"profile-{stamp}.pstats"
    python, module_args = reader_argv[0], reader_argv[1:]
    run_measured([python, "-m", "cProfile", "-o", os.fspath(prof), *module_args], env=env)
    with open(text_path, "w") as f:
        spy = py_spy_path()
        if spy is not None:
            raw = out_dir / f"profile-{stamp}.collapsed"
            result = subprocess.run(
                [os.fspath(spy), "record", "--rate", "500", "--format", "raw",
                 "--output", os.fspath(raw), "--", python, *module_args],
                env=env, capture_output=True, text=True,
            )  # fmt: skip
            if result.returncode == 0 and raw.exists():
                f.write(summarize_collapsed(raw.read_text()))
            else:
                f.write(f"py-spy failed: {result.stderr.strip()[-1000:]}\n")
            f.write("\n")
        stats = pstats.Stats(os.fspath(prof), stream=f)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(20)
    return os.fspath(text_path)
