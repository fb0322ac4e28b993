"""Import pyarrow without numpy in a process that only lands data: a start-up step.

pyarrow imports numpy whenever it is installed, for its pandas/numpy conversions. Landing never
converts to or from numpy (rows go from the binlog's bytes into Arrow buffers and on to
Parquet), yet numpy's import was a quarter of ``binlake run``'s start-up CPU: ~0.12 s of the
~0.45 s measured on this project's 2-core machine, paid by every run, every restart and every
``binlake snapshot``. pyarrow supports running without numpy (it then only refuses the numpy
conversions), so :func:`import_pyarrow_lean` imports it with numpy hidden — and only numpy's
import by pyarrow: afterwards ``import numpy`` works as usual for anything else. cloudpickle is
hidden the same way (its import costs start-up time too): pyarrow only prefers it to the standard pickle for pickling Python
objects it holds, which landing never does.

Only the commands that land and never hand Arrow data to pandas or Spark call it (see
``replica.cli``), as early as possible. It does nothing when pyarrow or numpy is already
imported (a test process, a library user), or when pyarrow is older than
:data:`LEAN_SINCE` (releases that required numpy), judged from pyarrow's version file without
importing anything heavy; when in doubt it imports pyarrow as usual.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys

__all__ = ["HIDDEN", "LEAN_SINCE", "MODULES", "import_pyarrow_lean", "pyarrow_major"]

#: The first pyarrow major version this module hides numpy from (numpy is optional there).
LEAN_SINCE = 18

#: What landing imports of pyarrow: each of these extension modules looks for numpy when it is
#: first imported, so all are imported while numpy is hidden.
MODULES = ("pyarrow", "pyarrow._compute", "pyarrow.parquet")

#: What pyarrow imports if it can and landing never uses, hidden while it is imported.
HIDDEN = ("numpy", "cloudpickle")

_VERSION = re.compile(r"""^__version__\s*=.*?['"](\d+)\.""", re.MULTILINE)


def pyarrow_major() -> int | None:
    """pyarrow's major version from its ``_generated_version.py``, without importing it; None
    when pyarrow or that file is not found or says something else."""
    try:
        spec = importlib.util.find_spec("pyarrow")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        try:
            with open(os.path.join(location, "_generated_version.py"), encoding="utf-8") as f:
                match = _VERSION.search(f.read())
        except OSError:
            continue
        if match is not None:
            return int(match.group(1))
    return None


def import_pyarrow_lean() -> bool:
    """Import pyarrow with numpy hidden from it; returns whether numpy stayed out."""
    if "pyarrow" in sys.modules or "numpy" in sys.modules:
        return False
    major = pyarrow_major()
    if major is None or major < LEAN_SINCE:
        return False
    hidden = [name for name in HIDDEN if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # "import numpy" → ImportError
    try:
        for name in MODULES:
            importlib.import_module(name)
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]
    return "numpy" not in sys.modules
