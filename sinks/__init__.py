"""Landing decoded transactions: Parquet files (pyarrow) and the Spark-side readers."""
