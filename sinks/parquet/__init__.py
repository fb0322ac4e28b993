"""Crash-safe Parquet change logs, one per table, schema-versioned."""
