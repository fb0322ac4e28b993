"""A small Parquet file written natively: a flush over thousands of tables writes thousands.

pyarrow sets up a writer per file and pays a fixed cost per column chunk (a 50-row file of
eight columns is 30 Parquet column chunks with ``_before`` and ``_missing``), in the flush's
writer threads (``files.py``), where thousands of such files compete with the daemon's thread
for the machine's cores. ``_native_parquet.c`` writes the same file for a small fraction of
that CPU: one row group, one PLAIN data page per column chunk, uncompressed (the codec
a small file gets by default, ``SinkOptions.small_file_compression``), levels bit-packed.

pyarrow stays the reference and does the part that carries the meaning: the footer's schema,
created_by and column orders are copied verbatim from a file pyarrow writes with no rows for the
same fields (:func:`template`, made once per set of fields: tables of one definition
share it, :data:`TEMPLATES` kept), so every type and logical annotation is pyarrow's; the
key-value metadata is made as pyarrow makes it — the schema's own, then ``ARROW:schema``, the
base64 of the schema's IPC serialization, field metadata included (also made once); the native code
adds the row group. It covers every type the sink lands (``types.arrow_type_for``: BOOL,
BIT and TIME land as integers) — integers, FLOAT/DOUBLE, DECIMAL <= 38 digits, DATE,
microsecond timestamps, strings and binaries, a struct of those (``_before``), a list of those
(``_missing``) — and booleans and time64[us] besides (no landed column has them; a table
built by hand may), and returns None for anything else, which pyarrow then writes.
``tests/unit/test_native_parquet.py`` reads both writers' files back over the type matrix,
random tables and the sink's every operation and requires identical tables, schemas and
metadata; ``bench/native_asan.sh`` runs it under the sanitizers.
``BINLAKE_NATIVE=0`` (as for the row decoder, ``protocol.native_switch``) makes pyarrow write
every file, as does an extension built for another :data:`ABI` (said once).

A flush hands its small files to :func:`new_pool`: C threads that encode them with the same code
as :func:`write` and write them to their staged paths, never taking the GIL (``files.py``).
"""

from __future__ import annotations

import base64
import collections
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from protocol import native_switch

from .identity_cache import IdentityCache

__all__ = ["ABI", "ENABLED", "NOT_COVERED", "NO_MEMORY", "OS_ERROR", "constants", "new_pool", "template",
           "warn_once", "write"]

#: The ``ABI_VERSION`` of ``_native_parquet.c`` this module calls.
ABI = 1

_module: Any
_module, _MISSING = native_switch.load(f"{__package__}._native_parquet", ABI,
                                       "sinks.parquet._native_parquet")

ENABLED = _module is not None and not native_switch.native_off()
_warned = False


def warn_once(log: Callable[[str], None]) -> None:
    """Say once per process that pyarrow writes every small file because ``_native_parquet``
    is not built, or built for another :data:`ABI` (nothing when BINLAKE_NATIVE=0 asked for
    that). Each extension is optional on its own (setup.py): this one missing beside the
    others, or a checkout built before it existed, would otherwise only show as CPU."""
    global _warned
    if _warned or _module is not None or native_switch.native_off():
        return
    _warned = True
    log(f"{_MISSING or 'sinks.parquet._native_parquet is not built'}: pyarrow writes every "
        "small Parquet file (the same tables, ~5x the CPU per file); reinstall binlake (or "
        "`python setup.py build_ext --inplace` in a checkout) to build it")

#: Templates kept, one per set of fields (the least recently used goes): ~8 KB each.
TEMPLATES = 256

_templates: collections.OrderedDict[bytes, bytes] = collections.OrderedDict()
_lock = threading.Lock()  # the templates are shared by whichever thread asks (tests, flushes)


def template(schema: pa.Schema) -> bytes:
    """pyarrow's Parquet file of ``schema`` with no rows: the footer the native writer
    completes (its schema, created_by and column orders; the rest is the file's own)."""
    sink = pa.BufferOutputStream()
    pq.ParquetWriter(sink, schema, compression="none", use_dictionary=False).close()
    return bytes(sink.getvalue())


def _template_for(schema: pa.Schema) -> bytes:
    """The template of ``schema``'s fields, made once per set of fields: keyed by their IPC
    serialization (names, types, nullability and field metadata, all a Parquet schema can
    depend on), never by the schema's own metadata (a table's name), which each file gets."""
    fields = schema.remove_metadata().serialize().to_pybytes()
    with _lock:
        found = _templates.get(fields)
        if found is not None:
            _templates.move_to_end(fields)
            return found
    made = template(schema)
    with _lock:
        _templates[fields] = made
        if len(_templates) > TEMPLATES:
            _templates.popitem(last=False)
    return made


def key_value_metadata(schema: pa.Schema) -> tuple[tuple[bytes, bytes], ...]:
    """The footer's key-value metadata as pyarrow writes it for ``schema``: the schema's own
    entries, then ``ARROW:schema`` (what pyarrow reads the Arrow types and all metadata from)."""
    own = tuple(schema.metadata.items()) if schema.metadata else ()
    return own + ((b"ARROW:schema", base64.b64encode(schema.serialize())),)


def write(table: pa.Table, statistics: tuple[str, ...]) -> bytes | None:
    """``table`` as the bytes of a one-row-group uncompressed Parquet file with footer
    statistics on the top-level int64 columns named in ``statistics``; None when the native
    writer is off or does not cover one of its columns (pyarrow then writes it). The same
    encoder as the pool's (:func:`new_pool`), in the calling thread: the reference the tests
    compare the pool's files and pyarrow's with."""
    if not ENABLED or table.num_rows == 0:
        return None
    batches = table.to_batches()
    if len(batches) != 1:
        batches = table.combine_chunks().to_batches()
    schema_capsule, array_capsule = batches[0].__arrow_c_array__()
    schema = table.schema
    data: bytes | None = _module.write(schema_capsule, array_capsule, _template_for(schema),
                                       statistics, key_value_metadata(schema))
    return data


#: Per-schema constants kept: a template is shared by schemas of the same fields, the
#: key-value metadata is a few KB per table.
CONSTANTS = 4096

_constants = IdentityCache(CONSTANTS)
_shared = IdentityCache(TEMPLATES)  # templates of the shared fields objects


def constants(schema: pa.Schema, fields: pa.Schema | None = None
              ) -> tuple[bytes, tuple[tuple[bytes, bytes], ...]]:
    """The template and key-value metadata of ``schema`` — the same object each time, a table
    version's — made once, not per file: serializing the schema twice (the template's key and
    ``ARROW:schema``) and the base64 were a large part of every small file's cost on the
    flush's thread. ``fields``: ``schema``'s fields as one object shared by the tables of
    the same fields (``TableVersion.fields_schema``), whose template is then found by its
    identity, not by serializing the fields. For the flush's thread only."""

    def make(schema: pa.Schema) -> tuple[bytes, tuple[tuple[bytes, bytes], ...]]:
        template = (_shared.get(fields, _template_for) if fields is not None
                    else _template_for(schema))
        return template, key_value_metadata(schema)

    made: tuple[bytes, tuple[tuple[bytes, bytes], ...]] = _constants.get(schema, make)
    return made


#: :meth:`Pool.reap` statuses besides 0 (written): the native writer does not cover the rows
#: (pyarrow writes the file), the file system refused (with an errno), no memory.
NOT_COVERED, OS_ERROR, NO_MEMORY = 1, 2, 3


def new_pool(threads: int, bound: int) -> Any:
    """Native writer threads (``_native_parquet.Pool``, up to ``threads``, made as jobs come;
    a submit waits while ``bound`` of its jobs of rows are unfinished), or None when the native writer
    is off. With pyarrow's writer in Python threads, they and the flush's thread fought for the
    GIL (half of a 2,000-table flush's thread time went waiting for it); these never take it.

    - ``submit(path, schema_capsule, array_capsule, template, statistics,
      key_value_metadata) -> job id``: encode and write a file;
    - ``write(path, data) -> job id``: write bytes as they are (never waits: they are in memory
      already; run when no rows wait);
    - ``reap(wait_all) -> [(job id, status, errno)]``;
    - ``close()``: join the threads.

    The pool holds a reference to everything a job's thread reads until the job is reaped:
    the capsules (and so the batch's buffers), the template, the statistics names and the
    key-value metadata (a tuple of bytes pairs; it copies only the path), so its threads read
    nothing Python may free. A capsule already imported into pyarrow is refused (ValueError).
    One pool per flush (``files.NativeFiles``): its ``reap`` answers for every job
    submitted to it."""
    return _module.Pool(threads, bound) if ENABLED else None
