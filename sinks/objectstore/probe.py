"""The start-time proof that a store honours the conditional writes the commit log rests on.

The object-store commit protocol decides every race with ``If-None-Match: *`` (a commit record
is created only if absent) and ``If-Match`` (a lease is renewed only if unchanged). A store that
accepts the headers but ignores them — older gateways, some emulators, a proxy that strips them —
would let two writers both "win" and silently corrupt the lake, so it is asked before any use:

1. create ``_probe/<random>`` with ``If-None-Match: *`` — it must succeed;
2. create it again the same way — the store must refuse (412);
3. replace it with ``If-Match`` and a made-up ETag — the store must refuse (412);
4. replace it with ``If-Match`` and the ETag of step 1 — it must succeed;
5. delete it.

A store that fails 2, 3 or 4 is refused with :class:`~sinks.errors.StoreRefused` (the daemon
stops, exit 4), never trusted. Errors of the store itself (unreachable, a 403) leave as they
are, classified by the store. The probe costs five requests per start.
"""

from __future__ import annotations

import secrets

from ..errors import StoreRefused
from .store import ObjectStore

__all__ = ["PROBE_PREFIX", "probe_conditional_writes"]

#: Where the probe's object lives (a bookkeeping name: readers skip names starting with ``_``).
PROBE_PREFIX = "_probe/"

_FIX = ("use a store that honours conditional writes (AWS S3; Ceph RADOS Gateway 20 or newer), "
        "and no proxy in between that drops If-None-Match / If-Match headers: without them two "
        "writers could both commit")


def probe_conditional_writes(store: ObjectStore) -> None:
    """Raise StoreRefused unless ``store`` keeps ``If-None-Match: *`` and ``If-Match``
    (module docstring); leaves nothing behind when it returns."""
    key = f"{PROBE_PREFIX}{secrets.token_hex(8)}"
    first = store.put_if_absent(key, b"binlake conditional-write probe 1")
    try:
        if first is None:
            raise StoreRefused("probe", store.url(key), "If-None-Match: * refused a new key "
                               "(412 for an object that did not exist)", _FIX)
        if store.put_if_absent(key, b"binlake conditional-write probe 2") is not None:
            raise StoreRefused("probe", store.url(key), "the store ignored If-None-Match: * "
                               "(a second create of the same key succeeded)", _FIX)
        if store.put_if_match(key, b"binlake conditional-write probe 3",
                              '"00000000000000000000000000000000"') is not None:
            raise StoreRefused("probe", store.url(key), "the store ignored If-Match (a replace "
                               "with a wrong ETag succeeded)", _FIX)
        if store.put_if_match(key, b"binlake conditional-write probe 4", first) is None:
            raise StoreRefused("probe", store.url(key), "If-Match refused the object's own "
                               "ETag", _FIX)
    finally:
        store.delete(key)
