"""``binlake run`` into a lake on S3: the test bed's Ceph RADOS Gateway on loopback, beside the
same daemon into a local directory, on the same binlog in the same run.

The gateway is the one the test suite starts (``tests/servers/ceph.py``: one monitor, one OSD on
an in-memory object store, radosgw), started once per benchmark run and only when this peer is
measured; ``BINLAKE_BENCH_S3_ENDPOINT`` (with the standard ``AWS_*`` keys) names one already
running instead. Each run lands into a fresh bucket, counted from the lake's commit log — the
rows of the data files its records keep, from their footers — and emptied afterwards, so the
in-memory store does not grow across rounds. The figure includes what S3 adds to a commit: the
streamed uploads, the commit record created with ``If-None-Match``, the lease, and the start's
probe and takeover (see docs/object-storage.md).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from .commands import DaemonTarget, Tree, run_config
from .measure import MeasureError, Measurement, run_measured

__all__ = ["ENDPOINT_VARIABLE", "S3Gateway", "measure_run_s3"]

ENDPOINT_VARIABLE = "BINLAKE_BENCH_S3_ENDPOINT"
_buckets = itertools.count(1)


@dataclass
class S3Gateway:
    """Where the S3 peer lands: an endpoint and its keys (never printed)."""

    endpoint: str
    access_key: str = field(repr=False)
    secret_key: str = field(repr=False)
    region: str = "us-east-1"
    _owned: Any = field(default=None, repr=False)  # a CephGateway this run started

    @classmethod
    def start(cls) -> S3Gateway:
        """The gateway named by the environment, else a Ceph gateway of the test bed's
        (MeasureError when its chroot is not built)."""
        endpoint = os.environ.get(ENDPOINT_VARIABLE)
        if endpoint:
            return cls(endpoint, os.environ["AWS_ACCESS_KEY_ID"],
                       os.environ["AWS_SECRET_ACCESS_KEY"])
        from tests.servers.ceph import CephError, CephGateway, gateway_root  # noqa: PLC0415

        try:
            gateway = CephGateway(gateway_root())
            gateway.start()
        except (LookupError, CephError) as exc:
            raise MeasureError(f"no S3 gateway: {exc}") from None
        return cls(gateway.endpoint, gateway.access_key, gateway.secret_key,
                   gateway.region, gateway)

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()

    def client(self) -> Any:
        import boto3  # noqa: PLC0415
        from botocore.config import Config  # noqa: PLC0415

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key,
                            config=Config(s3={"addressing_style": "path"}))

    def store(self, url: str) -> Any:
        from sinks.objectstore.s3 import S3Settings, open_store  # noqa: PLC0415

        return open_store(url, S3Settings(endpoint=self.endpoint, region=self.region,
                                          access_key_id=self.access_key,
                                          secret_access_key=self.secret_key))


def _landed(gateway: S3Gateway, url: str) -> dict[str, int]:
    """Rows, data files and their bytes that the lake's log keeps."""
    from sinks.objectstore.commit import CommitLog, live_objects  # noqa: PLC0415

    store = gateway.store(url)
    rows = files = size = 0
    for key in live_objects(CommitLog(store).records()):
        if any(part[:1] in "_." for part in key.split("/")) or not key.endswith(".parquet"):
            continue
        with store.open_input(key) as source:
            rows += pq.ParquetFile(source).metadata.num_rows
        info = store.head(key)
        files += 1
        size += info.size if info is not None else 0
    return {"rows": rows, "files": files, "lake_bytes": size}


def _empty(gateway: S3Gateway, bucket: str) -> None:
    client = gateway.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    client.delete_bucket(Bucket=bucket)


def measure_run_s3(tree: Tree, env: dict[str, str], target: DaemonTarget, first: str,
                   gateway: S3Gateway, work: Path, server_id: int,
                   expected_rows: int) -> Measurement:
    """``binlake run`` from ``first``/4 to the end of binlog into a fresh bucket's lake."""
    bucket = f"bench-{os.getpid()}-{next(_buckets)}"
    gateway.client().create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/lake"
    work.mkdir(parents=True, exist_ok=True)
    config = work / "s3.toml"
    config.write_text(run_config(target, url, first, server_id)
                      + f'[lake.s3]\nendpoint = "{gateway.endpoint}"\n')
    run_env = dict(tree.env(env), BINLAKE_SERVER_PASSWORD=target.password,
                   AWS_ACCESS_KEY_ID=gateway.access_key,
                   AWS_SECRET_ACCESS_KEY=gateway.secret_key,
                   TMPDIR=os.fspath(work))  # the sink's local spool
    try:
        measurement = run_measured(tree.argv("run", "--config", os.fspath(config)),
                                   env=run_env, stdout_to_devnull=True, cwd=tree.root)
        measurement.report.update(_landed(gateway, url))
    finally:
        config.unlink(missing_ok=True)
        with contextlib.suppress(Exception):
            _empty(gateway, bucket)
    if measurement.report["rows"] != expected_rows:
        raise MeasureError(f"binlake run into S3 landed {measurement.report['rows']} rows, the "
                           f"workload logged {expected_rows}")
    return measurement
