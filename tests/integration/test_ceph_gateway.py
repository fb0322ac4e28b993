"""The test bed's Ceph gateway does what binlake's object-store protocol relies on: whole objects,
ranged reads, ordered listings, multipart uploads, and the two conditional writes (``If-None-Match:
*`` with exactly one winner, ``If-Match``), asked with the field's S3 client (boto3), through
pyarrow's S3 filesystem, and through an s3fs mount."""

from __future__ import annotations

import os
import shutil
import threading

import pytest
from botocore.exceptions import ClientError

from tests.servers.ceph import CephGateway, S3fsMount

pytestmark = pytest.mark.s3


def _status(exc: ClientError) -> int:
    return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])


def test_put_get_range_and_listing(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    client = ceph_gateway.client()
    body = bytes(range(256)) * 64
    client.put_object(Bucket=s3_bucket, Key="a/b/data.bin", Body=body)
    assert client.get_object(Bucket=s3_bucket, Key="a/b/data.bin")["Body"].read() == body
    ranged = client.get_object(Bucket=s3_bucket, Key="a/b/data.bin", Range="bytes=1000-1009")
    assert ranged["Body"].read() == body[1000:1010]
    for key in ("a/z", "a/b/c", "_log/00000000000000000001.json", "a/a"):
        client.put_object(Bucket=s3_bucket, Key=key, Body=key.encode())
    listed = client.list_objects_v2(Bucket=s3_bucket, Prefix="a/")
    assert [item["Key"] for item in listed["Contents"]] == ["a/a", "a/b/c", "a/b/data.bin", "a/z"]
    paged = client.list_objects_v2(Bucket=s3_bucket, MaxKeys=2)
    assert [item["Key"] for item in paged["Contents"]] == ["_log/00000000000000000001.json", "a/a"]
    assert paged["IsTruncated"] is True


def test_multipart_upload_through_pyarrow(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    fs = ceph_gateway.filesystem()
    part = os.urandom(1024) * (6 * 1024)  # 6 MiB: more than one 5 MiB part
    with fs.open_output_stream(f"{s3_bucket}/big/object.bin") as out:
        for _ in range(3):
            out.write(part)
    info = fs.get_file_info(f"{s3_bucket}/big/object.bin")
    assert info.size == 3 * len(part)
    with fs.open_input_file(f"{s3_bucket}/big/object.bin") as reader:
        reader.seek(len(part) * 2 - 10)
        assert reader.read(20) == part[-10:] + part[:10]
    etag = ceph_gateway.client().head_object(Bucket=s3_bucket, Key="big/object.bin")["ETag"]
    # A multipart object's ETag ends in -<parts> (pyarrow chooses the part size).
    assert int(etag.strip('"').rpartition("-")[2]) >= 2, etag


def test_if_none_match_has_exactly_one_winner(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    outcomes: list[object] = []
    barrier = threading.Barrier(8)

    def create(n: int) -> None:
        client = ceph_gateway.client()
        barrier.wait()
        try:
            client.put_object(Bucket=s3_bucket, Key="_log/1.json", Body=f"writer {n}".encode(),
                              IfNoneMatch="*")
            outcomes.append(n)
        except ClientError as exc:
            outcomes.append(_status(exc))

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if o != 412]
    assert len(winners) == 1 and len(outcomes) == 8, outcomes
    body = ceph_gateway.client().get_object(Bucket=s3_bucket, Key="_log/1.json")["Body"].read()
    assert body == f"writer {winners[0]}".encode()


def test_if_none_match_on_multipart_completion(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    client = ceph_gateway.client()
    client.put_object(Bucket=s3_bucket, Key="taken", Body=b"first")
    upload = client.create_multipart_upload(Bucket=s3_bucket, Key="taken")
    part = client.upload_part(Bucket=s3_bucket, Key="taken", UploadId=upload["UploadId"],
                              PartNumber=1, Body=b"second")
    with pytest.raises(ClientError) as refused:
        client.complete_multipart_upload(
            Bucket=s3_bucket, Key="taken", UploadId=upload["UploadId"], IfNoneMatch="*",
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    assert _status(refused.value) == 412
    assert client.get_object(Bucket=s3_bucket, Key="taken")["Body"].read() == b"first"


def test_if_match(ceph_gateway: CephGateway, s3_bucket: str) -> None:
    client = ceph_gateway.client()
    first = client.put_object(Bucket=s3_bucket, Key="_lease", Body=b"holder 1")["ETag"]
    second = client.put_object(Bucket=s3_bucket, Key="_lease", Body=b"holder 2", IfMatch=first)
    with pytest.raises(ClientError) as stale:
        client.put_object(Bucket=s3_bucket, Key="_lease", Body=b"holder 3", IfMatch=first)
    assert _status(stale.value) == 412
    unquoted = second["ETag"].strip('"')
    client.put_object(Bucket=s3_bucket, Key="_lease", Body=b"holder 4", IfMatch=unquoted)
    assert client.get_object(Bucket=s3_bucket, Key="_lease")["Body"].read() == b"holder 4"
    with pytest.raises(ClientError) as gone:
        client.put_object(Bucket=s3_bucket, Key="_absent", Body=b"x", IfMatch=first)
    assert _status(gone.value) in (404, 412)


def test_s3fs_mount_shows_the_bucket(ceph_gateway: CephGateway, s3_bucket: str,
                                     tmp_path: os.PathLike[str]) -> None:
    if shutil.which("s3fs") is None:
        from tests.servers.plugin import unavailable

        unavailable("s3fs is not installed (scripts/setup.sh --test installs it)")
    client = ceph_gateway.client()
    client.put_object(Bucket=s3_bucket, Key="db/t/part-1.parquet", Body=b"one")
    with S3fsMount(ceph_gateway, s3_bucket, os.path.join(tmp_path, "mnt")) as mount:
        assert sorted(os.listdir(mount.mountpoint / "db" / "t")) == ["part-1.parquet"]
        client.put_object(Bucket=s3_bucket, Key="db/t/part-2.parquet", Body=b"two")
        assert sorted(os.listdir(mount.mountpoint / "db" / "t")) == [
            "part-1.parquet", "part-2.parquet"]
        assert (mount.mountpoint / "db" / "t" / "part-2.parquet").read_bytes() == b"two"
    assert not os.path.ismount(mount.mountpoint)
