"""The one thing pyproject.toml cannot say: the optional C extensions (the native row decoder,
the line formatter of `binlake decode`, the slot filler that builds each event's header, the
framing of a dump's packets and plain events, and the lake's batch of directories and empty files
made without the GIL, sinks/parquet/trees.py).

``optional=True``: a machine without a C compiler or Python headers still installs binlake, and
the daemon then decodes rows with the pure-Python reference (saying so once, see
protocol/binlog/native.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("protocol.binlog._native_rows", ["protocol/binlog/_native_rows.c"],
              extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
              optional=True),
    Extension("protocol.binlog._native_format", ["protocol/binlog/_native_format.c"],
              extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
              optional=True),
    Extension("protocol._native_slots", ["protocol/_native_slots.c"],
              extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
              optional=True),
    Extension("protocol._native_frames", ["protocol/_native_frames.c"],
              extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
              optional=True),
    Extension("sinks.parquet._native_fs", ["sinks/parquet/_native_fs.c"],
              extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
              optional=True),
    Extension("sinks.parquet._native_parquet", ["sinks/parquet/_native_parquet.c"],
              extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
              optional=True),
])
