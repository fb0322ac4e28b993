"""The Spark side of the lake: read change logs (batch and streaming), rebuild current state.

``python -m sinks.spark.current_state --lake … --db … --table … --out …`` (or the same file
under ``spark-submit``) writes a table's current state as Parquet.

Note: ``current_state`` here is the function; importing the job module
``sinks.spark.current_state`` explicitly replaces this package attribute with the module, so
import the function from ``sinks.spark.state`` in code that does both.
"""

from __future__ import annotations

from .readers import read_changes, stream_changes
from .schema import union_schema, version_schema
from .session import spark_session
from .state import current_state, last_reset_seq, materialize_state, read_current_state

__all__ = ["current_state", "last_reset_seq", "materialize_state", "read_changes",
           "read_current_state",
           "spark_session", "stream_changes", "union_schema", "version_schema"]
