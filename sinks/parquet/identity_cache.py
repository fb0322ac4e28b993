"""Values made once per object and found again by the object's identity.

A flush over thousands of tables meets the same few objects again and again — the columns
tuple the decoder shares between tables of one definition, a table version's schema, the fields
object shared by versions of one column list — and what is derived from them (a resolution, a
Parquet template, a schema file's text) is worth making once. Hashing such an object by value
costs what the cache saves, so it is found by ``id``; each entry keeps its object alive, so an
id is never reused while its entry is here.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

__all__ = ["IdentityCache"]


class IdentityCache:
    """``get(obj, make)``: ``make(obj)``, made once per object, the least recently used entry
    going past ``size``. Not thread-safe: one thread (the sink's) uses it."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: collections.OrderedDict[int, tuple[Any, Any]] = collections.OrderedDict()

    def get(self, obj: Any, make: Callable[[Any], Any]) -> Any:
        key = id(obj)
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            return found[1]
        made = make(obj)
        self._entries[key] = (obj, made)
        if len(self._entries) > self._size:
            self._entries.popitem(last=False)
        return made
