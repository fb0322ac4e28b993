"""The one thing pyproject.toml cannot say: the optional C extensions (the native row decoder
and the sink's batch builder that takes its Arrow buffers, the slot filler that builds each
event's header, the framing of a dump's packets and plain events, the lake's batch of
directories and empty files made without the GIL, sinks/parquet/trees.py, and the writer of a
flush's small Parquet files, sinks/parquet/small_file.py).

``optional=True``: a machine without a C compiler or Python headers still installs binlake, and
each part then runs its pure-Python reference (pyarrow for the Parquet files), which the daemon
says once (protocol/binlog/native.py, sinks/parquet/trees.py, sinks/parquet/small_file.py).
Each extension defines ``ABI_VERSION``; a build whose version is not the one its Python loader
states is not used at all (protocol/native_switch.py).
"""

from setuptools import Extension, setup


def _native(name: str) -> Extension:
    """An optional C extension (no compiler: the pure-Python path runs, and says so once)."""
    return Extension(name, [name.replace(".", "/") + ".c"],
                     extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
                     optional=True)


setup(ext_modules=[_native(name) for name in (
    "protocol.binlog._native_rows",
    "protocol._native_slots",
    "protocol._native_frames",
    "sinks.parquet._native_fs",
    "sinks.parquet._native_parquet",
    "sinks.parquet._native_batch",
)])
