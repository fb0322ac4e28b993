#!/usr/bin/env bash
# Installs what binlake needs on a Debian machine (run as root): the host MariaDB server and
# client (the sandbox server of the demo and the test bed), a Java runtime for Spark, and a
# Python virtual environment in .venv with binlake and its extras.
#
#   scripts/setup.sh            runtime + Spark (what `binlake demo` needs)
#   scripts/setup.sh --test     also the test tools and the servers of the test bed
set -euo pipefail
cd "$(dirname "$0")/.."
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

apt_packages=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || apt_packages+=(mariadb-server mariadb-client)
command -v java >/dev/null 2>&1 || apt_packages+=(default-jre-headless)
command -v python3 >/dev/null 2>&1 || apt_packages+=(python3)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || apt_packages+=(python3-venv python3-pip)
# The native row decoder (setup.py) is compiled when binlake is installed; without a compiler and
# the Python headers it is skipped and rows decode with the slower pure-Python decoder.
command -v gcc >/dev/null 2>&1 || apt_packages+=(gcc libc6-dev)
python3 -c 'import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))' \
  >/dev/null 2>&1 || apt_packages+=(python3-dev)
# pip reaches PyPI over HTTPS; a minimal Debian has no CA bundle (Java's packages only pull it in
# by chance).
[ -f /etc/ssl/certs/ca-certificates.crt ] || apt_packages+=(ca-certificates)
if [ "$want_test" = 1 ]; then
  command -v debootstrap >/dev/null 2>&1 || apt_packages+=(debootstrap)
  command -v openssl >/dev/null 2>&1 || apt_packages+=(openssl)
  # The benchmark smoke test records the commit it measured (a checkout may come without git).
  command -v git >/dev/null 2>&1 || apt_packages+=(git)
  # The S3 tests mount a bucket of the test bed's Ceph gateway with FUSE so Spark reads it as a
  # local path (pyspark ships no S3A connector).
  command -v s3fs >/dev/null 2>&1 || apt_packages+=(s3fs)
fi
if [ "${#apt_packages[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${apt_packages[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${apt_packages[@]}"
fi

# The venv holds binlake's declared dependencies and nothing of the machine's own Python, so what
# passes here passes on any machine. A .venv without a working pip (creation interrupted, or
# made before python3-venv was there), or one that sees the system's site packages (made by an
# older setup.sh), is made again.
if ! .venv/bin/python -m pip --version >/dev/null 2>&1 \
    || grep -qs "include-system-site-packages = true" .venv/pyvenv.cfg; then
  echo "setup: creating .venv"
  rm -rf .venv
  python3 -m venv .venv
fi
extras="spark"
[ "$want_test" = 1 ] && extras="test"
echo "setup: installing binlake[$extras] into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$extras]"
