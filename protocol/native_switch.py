"""The developer switches to binlake's optional C extensions, and the one loader they go through.

binlake builds six optional C extensions (setup.py); each repeats a pure-Python reference
(or pyarrow) that stays the definition of its results. Two environment variables, for
developers measuring or debugging one path against the other, are read here and nowhere else:

* ``BINLAKE_NATIVE=0``: every part runs its Python reference (or pyarrow), as if no
  extension were built;
* ``BINLAKE_NATIVE_ARROW=0``: the native row decoder stays on, but rows land from its Python
  values instead of Arrow chunks (the same lake).

They are not configuration keys: they change how fast, never what, and the lake and every
output stay the same either way.

An extension is used whole or not at all. Each exports ``ABI_VERSION``, an integer its C source
defines; the Python module that calls it states the version it was written against and loads
it through :func:`load`. A build whose version differs (an in-place build older or newer than
the Python code, or one from before the constant existed) is not used, and the caller's
warning says why once, instead of probing function by function and using half of it.
Whoever changes what an extension exports or how it is called bumps both numbers
(``tests/unit/test_native_switch.py`` compares each C source with its loader).

This module is sans-I/O like the rest of ``protocol``: it reads two environment variables and
imports modules, nothing else; ``sinks`` loads its own extensions through it too.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["native_off", "arrow_off", "load"]


def native_off() -> bool:
    """Whether ``BINLAKE_NATIVE=0`` asks for the Python references everywhere. Loaders ask at
    import; the once-per-process warnings ask when they are called (nothing to say then)."""
    return os.environ.get("BINLAKE_NATIVE", "1") == "0"


def arrow_off() -> bool:
    """Whether ``BINLAKE_NATIVE_ARROW=0`` asks rows to land from the decoder's Python values."""
    return os.environ.get("BINLAKE_NATIVE_ARROW", "1") == "0"


def load(name: str, abi: int, what: str) -> tuple[ModuleType | None, str]:
    """The extension ``name`` when it is built for ABI version ``abi``, else None and why
    (naming it as ``what``, e.g. "the native row decoder"); the reason is "" when loaded.

    The switch is the caller's to apply: some references are tested against an extension
    that the switch keeps out of the daemon's way."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:  # not built: no compiler when binlake was installed
            return None, f"{what} is not built"
        return None, f"{what} is not built ({exc})"
    except ImportError as exc:  # built, but it does not load (a symbol missing, …)
        return None, f"{what} is not built ({exc})"
    found = getattr(module, "ABI_VERSION", None)
    if found != abi:
        built = "no ABI version" if found is None else f"ABI version {found}"
        return None, (f"{what} is not used: its build has {built}, this binlake needs "
                      f"version {abi} (a build older or newer than the code)")
    return module, ""
