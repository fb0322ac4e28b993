"""Debian chroots that hold the server versions bookworm does not package.

MariaDB 11.8 comes from a trixie chroot, MySQL 9.7 from a sid chroot (the only Debian suite with
MySQL), the Ceph RADOS Gateway (the test bed's S3 server) from sid's Ceph 20 over a trixie base:
trixie's Ceph 18 and bookworm's 16 ignore ``If-None-Match`` on multipart completion and accept
``If-Match`` only with an unquoted ETag. Each is built once with ``debootstrap --variant=minbase`` plus ``apt-get install`` inside,
and cached under ``$BINLAKE_CACHE/chroots/<name>`` (default ``~/.cache/binlake``).

Building is crash-safe and race-safe:

- A chroot is built in a scratch directory next to its final place and renamed into place only
  after a marker file (``.binlake-chroot.json``, the recipe it was built from) is written last.
  A chroot without a matching marker, or without its server binary, counts as broken and is
  rebuilt.
- An exclusive ``fcntl`` lock per chroot serializes builders across processes; readers take the
  same lock shared for the moment they check the marker, so they never see a half-built chroot.
- ``debootstrap`` and every command run inside the chroot get a private mount namespace (see
  ``devtools.sandbox.in_root_argv``): the ``/proc``, ``/sys`` and ``/dev`` mounts they need
  disappear with their processes, on success, failure, Ctrl-C or SIGKILL alike. Before anything
  is deleted, :func:`remove_tree` still checks the host's mount table and unmounts whatever an
  older or foreign tool may have left there, and refuses to delete while anything stays mounted,
  so an ``rm -rf`` can never walk into the host's ``/dev``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from devtools.sandbox import in_root_argv, root_env

#: Bump when the recipe below changes in a way that needs existing chroots rebuilt.
RECIPE_VERSION = 1
MARKER = ".binlake-chroot.json"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


@dataclass(frozen=True)
class ChrootSpec:
    """What one chroot is: its directory name, Debian suite and the packages installed in it."""

    name: str
    suite: str
    packages: tuple[str, ...]
    server_binary: str
    client_binary: str
    #: Suites whose packages win over ``suite``'s (apt pins them higher).
    extra_suites: tuple[str, ...] = ()
    #: More binaries that must exist for the chroot to count as built.
    other_binaries: tuple[str, ...] = ()
    #: Whether a failing package configuration step (a maintainer script that needs systemd,
    #: which a chroot has not) is tolerated as long as every binary is in place.
    configure_may_fail: bool = False


TRIXIE_MARIADB = ChrootSpec(
    name="trixie",
    suite="trixie",
    packages=("mariadb-server", "mariadb-client"),
    server_binary="usr/sbin/mariadbd",
    client_binary="usr/bin/mariadb",
)
SID_MYSQL = ChrootSpec(
    name="sid",
    suite="sid",
    packages=("mysql-server-core", "mysql-client-core"),
    server_binary="usr/sbin/mysqld",
    client_binary="usr/bin/mysql",
)
CEPH = ChrootSpec(
    name="ceph",
    suite="trixie",
    extra_suites=("sid",),
    packages=("ceph-mon", "ceph-osd", "radosgw", "ceph-common"),
    server_binary="usr/bin/radosgw",
    client_binary="usr/bin/radosgw-admin",
    other_binaries=("usr/bin/ceph-mon", "usr/bin/ceph-osd", "usr/bin/ceph", "usr/bin/monmaptool"),
    # ceph-mon's post-installation script needs systemd; the binaries work without it.
    configure_may_fail=True,
)
SPECS: dict[str, ChrootSpec] = {spec.name: spec for spec in (TRIXIE_MARIADB, SID_MYSQL, CEPH)}


class ChrootError(Exception):
    """A chroot could not be built or removed."""


def cache_dir() -> Path:
    """``$BINLAKE_CACHE`` or ``~/.cache/binlake``."""
    configured = os.environ.get("BINLAKE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "binlake"


def chroots_dir() -> Path:
    return cache_dir() / "chroots"


def chroot_path(spec: ChrootSpec) -> Path:
    return chroots_dir() / spec.name


def _marker_content(spec: ChrootSpec) -> dict[str, object]:
    # Fields left at their defaults are not recorded, so chroots built before those fields
    # existed keep matching their marker.
    defaults = ChrootSpec(spec.name, spec.suite, (), "", "")
    fields = {
        key: value for key, value in asdict(spec).items()
        if key in _BASE_FIELDS or value != getattr(defaults, key)
    }  # fmt: skip
    return {"recipe": RECIPE_VERSION, **fields}


_BASE_FIELDS = ("name", "suite", "packages", "server_binary", "client_binary")


def _is_built(root: Path, spec: ChrootSpec) -> bool:
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return False
    expected = json.loads(json.dumps(_marker_content(spec)))  # tuples as lists, like the file
    recorded = {key: marker.get(key) for key in expected}
    return (
        recorded == expected
        and all((root / binary).exists() for binary in _binaries(spec))
    )


def _binaries(spec: ChrootSpec) -> tuple[str, ...]:
    return (spec.server_binary, spec.client_binary, *spec.other_binaries)


@contextlib.contextmanager
def _locked(spec: ChrootSpec, *, exclusive: bool) -> Iterator[None]:
    chroots_dir().mkdir(parents=True, exist_ok=True)
    with open(chroots_dir() / f".{spec.name}.lock", "a+") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock_file, fcntl.LOCK_UN)


def ready_chroot(spec: ChrootSpec) -> Path | None:
    """The chroot's path if it is fully built, else None. Waits while another process builds."""
    root = chroot_path(spec)
    with _locked(spec, exclusive=False):
        return root if _is_built(root, spec) else None


def debian_mirror() -> str:
    """The host's Debian mirror: the first ``URIs:`` of ``debian.sources`` (deb822), else the
    first ``deb`` line of ``sources.list``, else deb.debian.org."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    with contextlib.suppress(OSError):
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split(":", 1)[1].split()[0]
    with contextlib.suppress(OSError):
        for line in Path("/etc/apt/sources.list").read_text().splitlines():
            match = re.match(r"deb\s+(?:\[[^\]]*\]\s+)?(\S+)", line)
            if match and "security" not in match.group(1):
                return match.group(1)
    return DEFAULT_MIRROR


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path`` in this process's mount namespace, deepest first."""
    prefix = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as mountinfo:
        for line in mountinfo:
            # Field 5 is the mount point, with spaces etc. escaped as octal.
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def remove_tree(path: Path) -> None:
    """``rm -rf path``, but only after everything mounted below it is unmounted.

    Raises ChrootError (and deletes nothing) if a mount cannot be removed: deleting through a
    bind mount of ``/dev`` would delete the host's device nodes.
    """
    if not path.exists() and not path.is_symlink():
        return
    for point in mounts_under(path):
        subprocess.run(["umount", point], capture_output=True)
    for point in mounts_under(path):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    left = mounts_under(path)
    if left:
        raise ChrootError(f"refusing to delete {path}: still mounted: {', '.join(left)}")
    shutil.rmtree(path)


def _run(argv: list[str], log: Callable[[str], None], *, what: str) -> None:
    started = time.monotonic()
    result = subprocess.run(
        argv, env=dict(root_env(), DEBIAN_FRONTEND="noninteractive"),
        stdin=subprocess.DEVNULL, capture_output=True, text=True,
    )  # fmt: skip
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-40:])
        raise ChrootError(f"{what} failed (exit {result.returncode}):\n{tail}")
    log(f"  {what}: {time.monotonic() - started:.1f} s")


def _build(spec: ChrootSpec, scratch: Path, log: Callable[[str], None]) -> None:
    mirror = debian_mirror()
    # debootstrap mounts /proc and /sys in the target itself; a private namespace makes sure
    # those mounts die with it even if it is killed halfway.
    _run(
        ["unshare", "--mount", "--propagation", "private",
         "debootstrap", "--variant=minbase", spec.suite, os.fspath(scratch), mirror],
        log, what=f"debootstrap {spec.suite}",
    )  # fmt: skip
    (scratch / "etc/apt/sources.list").write_text(
        "".join(f"deb {mirror} {suite} main\n" for suite in (spec.suite, *spec.extra_suites))
    )
    if spec.extra_suites:
        (scratch / "etc/apt/preferences.d/99binlake").write_text(
            "".join(
                f"Package: *\nPin: release n={suite}\nPin-Priority: 990\n\n"
                for suite in spec.extra_suites
            )
        )
    # The archive's Release files may be past their Valid-Until date (sid, snapshots).
    (scratch / "etc/apt/apt.conf.d/99binlake").write_text(
        'Acquire::Check-Valid-Until "false";\nAcquire::Languages "none";\n'
    )
    # install-db resolves the host name; without the host's /etc/hosts it cannot.
    shutil.copyfile("/etc/hosts", scratch / "etc/hosts")
    policy = scratch / "usr/sbin/policy-rc.d"
    policy.write_text(
        "#!/bin/sh\n# binlake test bed: never start services in this chroot\nexit 101\n"
    )
    policy.chmod(0o755)
    _run(in_root_argv(scratch, ["apt-get", "update", "-q"]), log, what="apt-get update")
    install = in_root_argv(
        scratch, ["apt-get", "install", "-y", "-q", "--no-install-recommends", *spec.packages]
    )
    what = f"apt-get install {' '.join(spec.packages)}"
    if spec.configure_may_fail:
        try:
            _run(install, log, what=what)
        except ChrootError as exc:
            # Every package is unpacked before any is configured: a configuration step that
            # fails leaves the binaries in place, which the check below insists on.
            log(f"  {what}: a package's configuration failed; checking the binaries\n{exc}")
    else:
        _run(install, log, what=what)
    _run(in_root_argv(scratch, ["apt-get", "clean"]), log, what="apt-get clean")
    for binary in _binaries(spec):
        if not (scratch / binary).exists():
            raise ChrootError(f"{spec.name}: {binary} missing after install")
    # Written last: its presence means everything above finished.
    (scratch / MARKER).write_text(json.dumps(_marker_content(spec), indent=2) + "\n")


def ensure_chroot(
    spec: ChrootSpec, *, rebuild: bool = False, log: Callable[[str], None] = print
) -> Path:
    """Return the path of a fully built chroot for ``spec``, building it first if it is missing
    or broken (or ``rebuild`` is set). Safe to call from several processes at once."""
    root = chroot_path(spec)
    if not rebuild and ready_chroot(spec) is not None:
        return root
    with _locked(spec, exclusive=True):
        if not rebuild and _is_built(root, spec):
            return root  # another process built it while we waited
        log(f"building the {spec.name} chroot in {root} ({', '.join(spec.packages)})")
        started = time.monotonic()
        for stale in chroots_dir().glob(f".build-{spec.name}-*"):
            remove_tree(stale)
        scratch = chroots_dir() / f".build-{spec.name}-{os.getpid()}"
        try:
            _build(spec, scratch, log)
            remove_tree(root)
            os.rename(scratch, root)
        finally:
            if scratch.exists():
                remove_tree(scratch)
        log(f"  {spec.name} chroot ready in {time.monotonic() - started:.1f} s")
    return root
