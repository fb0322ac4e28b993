"""``binlake check`` on a lake in a bucket of the test bed's Ceph gateway, through the command
line: with the keys from the standard AWS variables the object store passes the probe; a wrong
secret, an unknown key id and a missing bucket each fail with a fix naming the bucket, and no
key appears in any output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers.ceph import CephGateway
from tests.servers.handle import ServerHandle

pytestmark = pytest.mark.s3


def _check(server: ServerHandle, gateway: CephGateway, tmp_path: Path, lake: str,
           **aws: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("BINLAKE_", "AWS_"))}
    env.update(BINLAKE_SERVER_SOCKET=server.socket, BINLAKE_SERVER_USER=server.users["repl"].name,
               BINLAKE_SERVER_PASSWORD=server.users["repl"].password, BINLAKE_LAKE_PATH=lake,
               BINLAKE_LAKE_S3_ENDPOINT=gateway.endpoint, BINLAKE_LAKE_S3_MAX_ATTEMPTS="1",
               BINLAKE_CONFIG=str(tmp_path / "empty.toml"), HOME=str(tmp_path))
    env.update({**gateway.s3_env(), **aws})
    (tmp_path / "empty.toml").write_text("")
    return subprocess.run([sys.executable, "-m", "replica.cli", "check", "--server-id", "61234"],
                          env=env, capture_output=True, text=True, timeout=120)


def _store_lines(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    at = next(n for n, line in enumerate(lines) if line[8:].startswith("object_store "))
    return [" ".join(line.split()) for line in lines[at:at + 2]]


def test_check_probes_the_bucket(mariadb_10_11: ServerHandle, ceph_gateway: CephGateway,
                                 s3_bucket: str, tmp_path: Path) -> None:
    lake = f"s3://{s3_bucket}/lakes/shop"
    ok = _check(mariadb_10_11, ceph_gateway, tmp_path, lake)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert _store_lines(ok.stdout)[0] == (
        f"ok object_store s3://{s3_bucket}/lakes/shop/ at {ceph_gateway.endpoint}: reachable, "
        "If-None-Match and If-Match honoured")
    assert ceph_gateway.client().list_objects_v2(Bucket=s3_bucket).get("KeyCount") == 0

    wrong_secret = "not-the-secret-" + "x" * 25
    bad = _check(mariadb_10_11, ceph_gateway, tmp_path, lake, AWS_SECRET_ACCESS_KEY=wrong_secret)
    assert bad.returncode == 1
    assert _store_lines(bad.stdout) == [
        f"FAIL object_store PUT If-None-Match s3://{s3_bucket}/lakes/shop/_probe/"
        + _store_lines(bad.stdout)[0].split("/_probe/")[1],
        "fix: the request signature did not match: the secret key does not belong to the "
        "access key id; set AWS_SECRET_ACCESS_KEY (or lake.s3.secret_access_key_file) to the "
        "key pair's secret, then start binlake again: it resumes from the lake's last commit"]
    assert _store_lines(bad.stdout)[0].endswith(": 403 SignatureDoesNotMatch")

    unknown = _check(mariadb_10_11, ceph_gateway, tmp_path, lake,
                     AWS_ACCESS_KEY_ID="BINLAKENOSUCHKEY0001")
    assert unknown.returncode == 1
    assert _store_lines(unknown.stdout)[0].endswith(": 403 InvalidAccessKeyId")

    missing = _check(mariadb_10_11, ceph_gateway, tmp_path, "s3://binlake-absent-bucket/x")
    assert missing.returncode == 1
    assert _store_lines(missing.stdout)[1] == (
        "fix: the bucket binlake-absent-bucket does not exist at this endpoint: create it "
        "(binlake never creates buckets) or correct lake.path / lake.s3.endpoint, then start "
        "binlake again: it resumes from the lake's last commit")

    for result in (ok, bad, unknown, missing):
        output = result.stdout + result.stderr
        for secret in (ceph_gateway.secret_key, ceph_gateway.access_key, wrong_secret,
                       "BINLAKENOSUCHKEY0001", mariadb_10_11.users["repl"].password):
            assert secret not in output
