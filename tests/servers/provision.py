"""Prepare every server flavor of the test bed: ``python -m tests.servers.provision``.

Run by ``scripts/test.sh`` before pytest (as root). Installs the host's MariaDB 10.11 if it is
missing and builds (or checks) the trixie and sid chroots and the ceph chroot of the S3 gateway
(``ceph.py``); a warm run only reads three marker files.

    python -m tests.servers.provision             # what is missing
    python -m tests.servers.provision --rebuild   # rebuild the chroots from scratch
    python -m tests.servers.provision sid         # just one chroot
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from devtools.sandbox import SandboxError, ensure_host_mariadb

from .chroot import SPECS, ChrootError, ensure_chroot


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.servers.provision", description=__doc__)
    parser.add_argument("chroots", nargs="*", choices=[[], *SPECS], help="default: all")
    parser.add_argument("--rebuild", action="store_true", help="rebuild even if cached")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("provision: needs root (debootstrap, chroot, mount namespaces)", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        ensure_host_mariadb()
        for name in args.chroots or list(SPECS):
            ensure_chroot(SPECS[name], rebuild=args.rebuild)
    except (ChrootError, SandboxError) as exc:
        print(f"provision: {exc}", file=sys.stderr)
        return 1
    print(f"provision: test bed servers ready in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
