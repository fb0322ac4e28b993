"""A faster ``__init__`` for the frozen, slotted dataclasses built once per binlog event.

A frozen dataclass's generated ``__init__`` stores each field with
``object.__setattr__(self, name, value)`` (plain assignment would hit the frozen class's
``__setattr__``, which raises): a call through ``object.__setattr__`` per field, and a one-row
transaction builds a dozen such objects (headers, events, positions, GTIDs, transaction items) —
about a tenth of the daemon's CPU on a stream of one-row transactions. :func:`fast_init` gives the class an equivalent ``__init__``
that stores through the slots' own descriptors (``Slot.__set__``), a third of the cost.

The instances are the same: same fields, defaults, ``__post_init__`` call, immutability
(``__setattr__`` still raises ``FrozenInstanceError``), equality, hashing, ``replace``,
pickling. Only classes the rewrite is exact for are accepted; anything else (no slots, not
frozen, ``init=False`` / keyword-only fields, default factories) is refused at import time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from . import native_switch

__all__ = ["ABI", "NATIVE_SLOTS", "NATIVE_SLOTS_MISSING", "fast_init", "positional_maker"]

_C = TypeVar("_C", bound=type)
_T = TypeVar("_T")


class _Probe:
    __slots__ = ("x",)


_SLOT = type(_Probe.__dict__["x"])  # member_descriptor


def fast_init(cls: _C) -> _C:
    """Replace the ``__init__`` of the frozen, slotted dataclass ``cls`` (a class decorator,
    applied above ``@dataclass(frozen=True, slots=True)``)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"fast_init needs a frozen, slotted dataclass, not {cls.__name__}")
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    namespace: dict[str, Any] = {}
    params_src: list[str] = []
    for f in fields:
        if not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"fast_init cannot rewrite field {cls.__name__}.{f.name}")
        if f.default is dataclasses.MISSING:
            params_src.append(f.name)
        else:
            namespace[f"_d_{f.name}"] = f.default
            params_src.append(f"{f.name}=_d_{f.name}")
        slot = getattr(cls, f.name)  # the slot's descriptor, maybe a base class's
        if type(slot) is not _SLOT:
            raise TypeError(f"fast_init: {cls.__name__}.{f.name} is not a slot")
        namespace[f"_s_{f.name}"] = slot.__set__
    body = [f"    _s_{name}(self, {name})" for name in names]
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()")
    source = (f"def __init__(self, {', '.join(params_src)}):\n"
              + ("\n".join(body) if body else "    pass") + "\n")
    exec(source, namespace)  # noqa: S102 - generated from the class's own field names
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    type.__setattr__(cls, "__init__", init)
    return cls


#: The ``ABI_VERSION`` of ``_native_slots.c`` this module calls.
ABI = 1

_native_slots: Any
#: Why ``protocol._native_slots`` is not used ("" when it is): not built, or built for another
#: :data:`ABI` (``protocol.binlog.native.warn_once`` says it).
_native_slots, NATIVE_SLOTS_MISSING = native_switch.load(
    "protocol._native_slots", ABI, "protocol._native_slots")

#: Whether ``protocol._native_slots`` is loaded (BINLAKE_NATIVE=0 still keeps it unused).
NATIVE_SLOTS = _native_slots is not None


def positional_maker(cls: type[_T], *, checked_by_caller: bool = False) -> Callable[..., _T]:
    """``cls`` itself, or a callable building the same instances in C when the optional
    extension ``protocol._native_slots`` is built (and ``BINLAKE_NATIVE`` is not ``0``).

    For the hottest construction, once per binlog event: the maker takes every field,
    positionally (defaults too), and stores it in its slot, with no Python frame or
    descriptor call. Only classes whose ``__init__`` does nothing else qualify: frozen, slotted,
    no ``__post_init__``, no keyword-only or factory fields; anything else gets ``cls``.
    ``checked_by_caller``: a ``__post_init__`` that only validates does not disqualify the
    class, for a caller whose values hold its invariants by construction (e.g. integers a
    fixed-width unpack read); the maker then skips the check.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if (params is None or not params.frozen or "__slots__" not in cls.__dict__
            or (hasattr(cls, "__post_init__") and not checked_by_caller)
            or native_switch.native_off()):
        return cls
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(not f.init or f.kw_only or f.default_factory is not dataclasses.MISSING
           for f in fields):
        return cls
    if _native_slots is None:  # not built: the class itself (protocol.binlog.native warns once)
        return cls
    maker: Callable[..., _T] = _native_slots.maker(cls, tuple(f.name for f in fields))
    return maker
