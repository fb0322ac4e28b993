"""A real S3 server for the test bed: the Ceph RADOS Gateway on a one-OSD RADOS cluster.

:class:`CephGateway` starts, from the ``ceph`` chroot (``chroot.py``: sid's Ceph 20), one
``ceph-mon``, one ``ceph-osd`` whose object store is memory (``memstore``: nothing touches a disk,
its size capped by ``$BINLAKE_CEPH_MEMSTORE_BYTES``) and one ``radosgw``, all on free ports of
127.0.0.1 in a temporary directory, with authentication between the daemons switched off (the
cluster is private to the test run; the gateway still checks S3 signatures). It creates one S3
user with known keys and writes a first object, so the pools the gateway creates lazily exist
before a test measures anything.

Why Ceph, and why this shape (measured, see the shared notes on servers): Ceph 20's gateway
honours everything binlake's object-store protocol relies on — ranged reads, consistent
listings, multipart uploads, ``If-None-Match: *`` (also on multipart completion) and
``If-Match`` — where Ceph 18 and 16 do not, and where the gateway's stand-alone SQLite backend
returns wrong bytes for ranged reads. A real RADOS cluster of one of each daemon is the
smallest that runs the real gateway code.

Stop order matters: the gateway first, then the OSD, then the monitor (a gateway whose monitor
is gone ignores SIGTERM; the gateway is killed outright, see ``CephGateway.__init__``). Every daemon gets SIGTERM if the test process dies
(``PR_SET_PDEATHSIG``), and its temporary directory is removed by :meth:`CephGateway.close`.

The pytest side (fixtures ``ceph_gateway`` and ``s3_bucket``) is at the bottom: the gateway is
started once per session, only when a test asks for it; such tests carry the ``s3`` marker,
which implies ``server`` (they need the test bed's servers, so the quick suite skips them).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

from devtools.sandbox import (
    _die_with_parent,
    free_port,
    in_root_argv,
    root_env,
    terminate,
    timeout_scale,
)

from .chroot import CEPH, chroot_path, ready_chroot

__all__ = ["CephError", "CephGateway", "S3fsMount"]

#: Environment variable: bytes of memory the OSD's object store may hold (default 2 GiB).
MEMSTORE_BYTES_ENV = "BINLAKE_CEPH_MEMSTORE_BYTES"
_DEFAULT_MEMSTORE_BYTES = 2 * 1024**3
#: How long each daemon may take to come up, before the machine's load scale.
_START_TIMEOUT = 60.0
_STOP_TIMEOUT = 20.0
#: Region the gateway answers for (its default zonegroup takes any region in the signature).
REGION = "us-east-1"


class CephError(Exception):
    """The gateway (or one of the daemons under it) could not be started or queried."""


class _Daemon:
    """One Ceph process, started in the foreground from the chroot, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log: Path,
                 stop_signal: signal.Signals = signal.SIGTERM) -> None:
        self.name = name
        self.stop_signal = stop_signal
        self.argv = argv
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                self.argv, env=root_env(), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
            )  # fmt: skip

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = _STOP_TIMEOUT) -> None:
        """The stop signal, then SIGKILL if it is still there after ``timeout`` seconds."""
        process, self.process = self.process, None
        if process is not None:
            terminate(process, timeout, self.stop_signal)

    def tail(self, lines: int = 25) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.strip().splitlines()[-lines:]) or "(empty)"


class CephGateway:
    """One RADOS Gateway (S3 on ``endpoint``) over a one-monitor, one-OSD RADOS cluster.

    Attributes:
        endpoint: ``http://127.0.0.1:PORT``, the S3 endpoint.
        access_key, secret_key: the S3 user's keys (random per gateway; never printed).
        region: the region to sign requests for.
    """

    region = REGION

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.base = Path(tempfile.mkdtemp(prefix="binlake-ceph-", dir=self.root / "tmp"))
        (self.base / "owner.pid").write_text(f"{os.getpid()}\n")
        self.mon_port = free_port()
        self.rgw_port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.rgw_port}"
        self.access_key = "BINLAKE" + secrets.token_hex(6).upper()
        self.secret_key = secrets.token_urlsafe(30)
        self._conf = self._inside(self.base / "ceph.conf")
        self._mon = _Daemon("ceph-mon", self._argv("ceph-mon", "-f", "-i", "a"),
                            self.base / "mon.out")
        self._osd = _Daemon("ceph-osd", self._argv("ceph-osd", "-f", "-i", "0"),
                            self.base / "osd.out")
        # SIGTERM makes radosgw wait for its clients' idle keep-alive connections to close
        # (tens of seconds); its state is all in RADOS, so killing it loses nothing.
        self._rgw = _Daemon("radosgw", self._argv("radosgw", "-f", "-n", "client.rgw"),
                            self.base / "rgw.out", stop_signal=signal.SIGKILL)
        self._buckets = 0

    def __repr__(self) -> str:
        return f"<CephGateway {self.endpoint} base={self.base}>"

    # --- paths and commands --------------------------------------------------------------------

    def _inside(self, host_path: Path) -> str:
        return "/" + os.fspath(host_path.relative_to(self.root))

    def _argv(self, program: str, *args: str) -> list[str]:
        return in_root_argv(self.root, [program, "-c", self._conf, *args])

    def _tool(self, program: str, *args: str, timeout: float = 60.0) -> str:
        """Run a Ceph tool to completion; its stdout, or CephError with what it printed."""
        try:
            result = subprocess.run(
                self._argv(program, *args), env=root_env(), stdin=subprocess.DEVNULL,
                capture_output=True, text=True, timeout=timeout * timeout_scale(),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise CephError(f"{program} {' '.join(args)} did not finish in time") from None
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip().splitlines()[-20:]
            raise CephError(f"{program} {' '.join(args)} failed (exit {result.returncode}):\n"
                            + "\n".join(output))
        return result.stdout

    def _config(self) -> str:
        base = self._inside(self.base)
        memstore = int(os.environ.get(MEMSTORE_BYTES_ENV) or _DEFAULT_MEMSTORE_BYTES)
        return f"""\
[global]
fsid = {uuid.uuid4()}
mon_host = [v2:127.0.0.1:{self.mon_port}]
ms_bind_msgr1 = false
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
# Without this a client cannot reach a monitor that runs without authentication.
ms_mon_client_mode = crc
run_dir = {base}/run
admin_socket = {base}/run/$name.asok
log_file = {base}/log/$name.log
log_to_stderr = false
err_to_stderr = true
mon_cluster_log_file = {base}/log/cluster.log
keyring = /dev/null
mon_data = {base}/mon/$cluster-$id
osd_data = {base}/osd/$cluster-$id
osd_objectstore = memstore
memstore_device_bytes = {memstore}
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
osd_crush_chooseleaf_type = 0
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_data_avail_crit = 1
mon_data_avail_warn = 2

[client.rgw]
rgw_frontends = beast endpoint=127.0.0.1:{self.rgw_port}
rgw_data = {base}/rgw
"""

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Create the cluster, start the three daemons, create the user and warm the gateway
        up; CephError (with the failing daemon's log) if any step fails."""
        started = time.monotonic()
        for sub in ("run", "log", "mon/ceph-a", "osd/ceph-0", "rgw"):
            (self.base / sub).mkdir(parents=True, exist_ok=True)
        (self.base / "ceph.conf").write_text(self._config())
        monmap = self._inside(self.base / "monmap")
        fsid = self._config_value("fsid")
        self._tool("monmaptool", "--create", "--fsid", fsid, "--addv", "a",
                   f"[v2:127.0.0.1:{self.mon_port}]", monmap)
        self._tool("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap)
        self._mon.start()
        self._wait(lambda: self._tool("ceph", "mon", "stat", timeout=15), self._mon)
        osd_id = self._tool("ceph", "osd", "create").strip()
        if osd_id != "0":
            raise CephError(f"ceph osd create gave id {osd_id!r}, expected 0")
        self._tool("ceph-osd", "-i", "0", "--mkfs")
        self._osd.start()
        self._wait(self._osd_up, self._osd)
        self._tool("radosgw-admin", "user", "create", "--uid=binlake", "--display-name=binlake",
                   f"--access-key={self.access_key}", f"--secret={self.secret_key}",
                   timeout=120)
        self._rgw.start()
        self._wait(self._answers, self._rgw)
        self._warm_up()
        self.start_seconds = time.monotonic() - started

    def _config_value(self, key: str) -> str:
        for line in (self.base / "ceph.conf").read_text().splitlines():
            name, _, value = line.partition("=")
            if name.strip() == key:
                return value.strip()
        raise KeyError(key)

    def _osd_up(self) -> None:
        if "1 up" not in self._tool("ceph", "osd", "stat", timeout=15):
            raise CephError("the OSD is not up yet")

    def _answers(self) -> None:
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=5).close()
        except urllib.error.HTTPError:
            return  # any HTTP answer (403 for an anonymous request) means it serves
        except OSError as exc:
            raise CephError(f"the gateway does not answer yet: {exc}") from None

    def _wait(self, probe: Any, daemon: _Daemon) -> None:
        deadline = time.monotonic() + _START_TIMEOUT * timeout_scale()
        while True:
            if not daemon.running():
                raise CephError(f"{daemon.name} exited while starting:\n{daemon.tail()}\n"
                                f"{self._log_tail(daemon)}")
            try:
                probe()
                return
            except CephError as exc:
                if time.monotonic() > deadline:
                    raise CephError(f"{daemon.name} did not come up: {exc}\n"
                                    f"{self._log_tail(daemon)}") from None
            time.sleep(0.2)

    def _log_tail(self, daemon: _Daemon) -> str:
        names = {"ceph-mon": "mon.a", "ceph-osd": "osd.0", "radosgw": "client.rgw"}
        log = _Daemon(daemon.name, [], self.base / "log" / f"{names[daemon.name]}.log")
        return f"--- {log.log.name} ---\n{log.tail()}"

    def _warm_up(self) -> None:
        """The first bucket and object make the gateway create its data pools (seconds)."""
        client = self.client()
        client.create_bucket(Bucket="binlake-warm-up")
        client.put_object(Bucket="binlake-warm-up", Key="warm", Body=b"up")
        client.delete_object(Bucket="binlake-warm-up", Key="warm")
        client.delete_bucket(Bucket="binlake-warm-up")

    def stop_gateway(self) -> None:
        """Stop radosgw only (the cluster stays): requests then fail to connect."""
        self._rgw.stop()

    def start_gateway(self) -> None:
        """Start radosgw again after :meth:`stop_gateway`, same port, same data."""
        if self._rgw.running():
            return
        self._rgw.start()
        self._wait(self._answers, self._rgw)

    def close(self) -> None:
        """Stop the gateway, the OSD and the monitor, in that order; remove the directory."""
        for daemon in (self._rgw, self._osd, self._mon):
            with contextlib.suppress(Exception):
                daemon.stop()
        shutil.rmtree(self.base, ignore_errors=True)

    # --- using it -------------------------------------------------------------------------------

    def client(self) -> Any:
        """A boto3 S3 client for the gateway, signed with the user's keys."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.region,
            aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
        )  # fmt: skip

    def filesystem(self) -> Any:
        """A ``pyarrow.fs.S3FileSystem`` for the gateway."""
        from pyarrow import fs

        return fs.S3FileSystem(
            endpoint_override=self.endpoint, scheme="http", region=self.region,
            access_key=self.access_key, secret_key=self.secret_key,
        )  # fmt: skip

    def new_bucket(self, stem: str = "t") -> str:
        """Create a bucket with a name no other test of the session uses; its name."""
        self._buckets += 1
        name = f"{stem.lower().replace('_', '-')[:40]}-{os.getpid()}-{self._buckets}"
        self.client().create_bucket(Bucket=name)
        return name

    def s3_env(self) -> dict[str, str]:
        """The standard AWS environment variables that give a client the user's keys."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_DEFAULT_REGION": self.region}

    def radosgw_admin(self, *args: str) -> str:
        """Run ``radosgw-admin`` on the cluster (quotas, rate limits, users); its stdout."""
        return self._tool("radosgw-admin", *args, timeout=120)


class S3fsMount:
    """A bucket mounted as a local directory with ``s3fs`` (FUSE), for readers that only take
    paths — Spark here has no S3A connector. Metadata is never cached (``max_stat_cache_size=0``),
    so a listing shows the bucket as it is now."""

    def __init__(self, gateway: CephGateway, bucket: str, mountpoint: str | os.PathLike[str]) -> None:
        self.gateway = gateway
        self.bucket = bucket
        self.mountpoint = Path(mountpoint)
        self._passwd = Path(tempfile.mkstemp(prefix="binlake-s3fs-")[1])
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __enter__(self) -> S3fsMount:
        self.mount()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.unmount()

    def mount(self) -> None:
        if shutil.which("s3fs") is None:
            raise CephError("s3fs is not installed (apt-get install s3fs, or "
                            "scripts/setup.sh --test)")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self._passwd.write_text(f"{self.gateway.access_key}:{self.gateway.secret_key}\n")
        self._passwd.chmod(0o600)
        self._log = open(f"{self._passwd}.log", "wb")  # noqa: SIM115 - closed in unmount
        self._process = subprocess.Popen(
            ["s3fs", self.bucket, os.fspath(self.mountpoint), "-f",
             "-o", f"url={self.gateway.endpoint}", "-o", "use_path_request_style",
             "-o", f"passwd_file={self._passwd}", "-o", "max_stat_cache_size=0",
             "-o", f"endpoint={self.gateway.region}", "-o", "ro"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )  # fmt: skip
        deadline = time.monotonic() + 30 * timeout_scale()
        while not os.path.ismount(self.mountpoint):
            if self._process.poll() is not None or time.monotonic() > deadline:
                log = Path(f"{self._passwd}.log").read_text(errors="replace")[-2000:]
                self.unmount()
                raise CephError(f"s3fs did not mount {self.bucket}:\n{log}")
            time.sleep(0.1)

    def unmount(self) -> None:
        if os.path.ismount(self.mountpoint):
            subprocess.run(["umount", os.fspath(self.mountpoint)], capture_output=True)
        if self._process is not None:
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        for path in (self._passwd, Path(f"{self._passwd}.log")):
            with contextlib.suppress(OSError):
                path.unlink()


def gateway_root() -> str:
    """The ceph chroot's path, or raise LookupError saying why it cannot be had."""
    if os.geteuid() != 0:
        raise LookupError("ceph: running the gateway from a chroot needs root")
    root = ready_chroot(CEPH)
    if root is None:
        raise LookupError(f"ceph: chroot {chroot_path(CEPH)} is not built; run "
                          "`python -m tests.servers.provision` (as root)")
    return os.fspath(root)


def remove_stale(root: str | os.PathLike[str]) -> None:
    """Delete the directories of gateways whose test process is gone (killed outright)."""
    for base in Path(root, "tmp").glob("binlake-ceph-*"):
        try:
            owner = int((base / "owner.pid").read_text().strip())
            os.kill(owner, 0)
        except (OSError, ValueError):
            shutil.rmtree(base, ignore_errors=True)


# --- pytest wiring --------------------------------------------------------------------------------


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: Sequence[pytest.Item]) -> None:
    """A test that needs the gateway needs the test bed: ``s3`` implies ``server``."""
    for item in items:
        if item.get_closest_marker("s3") is not None and item.get_closest_marker("server") is None:
            item.add_marker(pytest.mark.server)


@pytest.fixture(scope="session")
def ceph_gateway() -> Iterator[CephGateway]:
    """The session's gateway, started on first use (~15-25 s) and stopped at the end."""
    from .plugin import unavailable

    try:
        root = gateway_root()
    except LookupError as exc:
        unavailable(str(exc))
    remove_stale(root)
    gateway = CephGateway(root)
    try:
        gateway.start()
    except BaseException:
        gateway.close()
        raise
    try:
        yield gateway
    finally:
        gateway.close()


@pytest.fixture
def s3_bucket(ceph_gateway: CephGateway, request: pytest.FixtureRequest) -> str:
    """A fresh, empty bucket on the session's gateway for this test."""
    if request.node.get_closest_marker("s3") is None:
        pytest.fail("a test using the Ceph gateway must be marked @pytest.mark.s3", pytrace=False)
    return ceph_gateway.new_bucket(request.node.name.split("[")[0][:30])
