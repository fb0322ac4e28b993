#!/usr/bin/env bash
# Proves the README's two commands on a genuinely fresh Debian machine. A manual check for
# developers (CI's machine already has Python, Java and the rest, so a missing install step could
# hide there); CI does not run it. Needs root, debootstrap, unshare and git on the host.
#
#   scripts/fresh-machine-trial.sh            demo + setup --test + unit tests     (3-6 min)
#   scripts/fresh-machine-trial.sh --full     ... then the whole scripts/test.sh   (12-15 min)
#   scripts/fresh-machine-trial.sh --rebuild  debootstrap the cached base root again (+1 min)
#   scripts/fresh-machine-trial.sh --keep     leave the trial root behind for a look inside
#
# What it does:
# 1. A minimal Debian root (`debootstrap --variant=minbase`, suite $BINLAKE_TRIAL_SUITE, default
#    bookworm; the host's mirror) is built once and cached as $BINLAKE_TRIAL_DIR/base-<suite>
#    (default ~/.cache/binlake/trial). Each run copies it afresh to $BINLAKE_TRIAL_DIR/run.
# 2. A `git clone` of this checkout (its committed HEAD: uncommitted changes are not tried) goes
#    to /root/binlake in that root.
# 3. Inside it, as root with a clean environment (env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:
#    /bin): scripts/demo.sh, then scripts/setup.sh --test and the unit tests
#    (.venv/bin/python -m pytest -m "not server and not spark"), then with --full scripts/test.sh.
#    Everything they need must come from Debian's archive and PyPI. BINLAKE_TRIAL_SUITE=trixie
#    tries the next Debian release (the README says "bookworm or newer").
#
# Each command runs in private mount and PID namespaces (unshare --mount --pid --fork
# --kill-child): /proc, /sys and /dev are mounted for the root inside them only, so the mounts
# (and every process, the sandbox MariaDB included) vanish when the step ends, on Ctrl-C, or when
# its unshare is killed (unshare ignores SIGTERM while it waits: stop a detached trial with
# SIGKILL to the step's unshare); the host never sees them. The trial root is deleted at the end
# (not with --keep), and only after /proc/self/mountinfo shows nothing mounted below it.
#
# The only thing taken from the host besides /etc/hosts and /etc/resolv.conf: the local CA
# certificates in /usr/local/share/ca-certificates, for machines whose HTTPS goes through an
# intercepting proxy (a fresh machine behind it would need them too). They are installed when
# setup.sh installs ca-certificates, exactly as on such a machine. Logs go to
# $BINLAKE_TRIAL_DIR/logs/<step>.log; a summary with timings is printed at the end.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
trial_dir=${BINLAKE_TRIAL_DIR:-$HOME/.cache/binlake/trial}
suite=${BINLAKE_TRIAL_SUITE:-bookworm}
full=0 rebuild=0 keep=0
for arg in "$@"; do
  case $arg in
    --full) full=1 ;;
    --rebuild) rebuild=1 ;;
    --keep) keep=1 ;;
    *) echo "usage: $0 [--full] [--rebuild] [--keep]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "fresh-machine-trial: run as root" >&2; exit 2; }
for tool in debootstrap unshare git; do
  command -v "$tool" >/dev/null || { echo "fresh-machine-trial: needs $tool" >&2; exit 2; }
done

mkdir -p "$trial_dir/logs"
trial_dir=$(cd "$trial_dir" && pwd -P)
base="$trial_dir/base-$suite"
root="$trial_dir/run"
summary=()

# Mount points at or below $1 in our mount namespace (there should never be any).
mounts_under() {
  awk -v p="$1" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo
}

# rm -rf that refuses while anything is mounted below the directory (a bind mount of /dev there
# would take the host's device nodes with it) and never crosses into another file system.
remove_tree() {
  [ -e "$1" ] || return 0
  if [ -n "$(mounts_under "$1")" ]; then
    echo "fresh-machine-trial: refusing to delete $1, still mounted:" >&2
    mounts_under "$1" >&2
    return 1
  fi
  rm -rf --one-file-system "$1"
}

# The host's Debian mirror: the first non-security URIs line (deb822), else deb.debian.org.
debian_mirror() {
  local uri
  uri=$(awk '/^URIs:/ && !/security/ { print $2; exit }' \
    /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

# Runs "$@" as root inside $root, in throwaway mount and PID namespaces, with a clean environment.
# The root is bind-mounted onto itself so that / is a mount point inside, as on a real machine
# (unshare --propagation, which scripts/test.sh's chroot builder uses, fails on a plain chroot).
in_root() {
  unshare --mount --pid --fork --kill-child --propagation private sh -c '
    r=$0
    mount --bind "$r" "$r" && mount -t proc proc "$r/proc" && mount -t sysfs sysfs "$r/sys" \
      && mount --rbind /dev "$r/dev" || exit 125
    exec chroot "$r" env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"' "$root" "$@"
}

# step NAME COMMAND...: runs it, logging to logs/NAME.log, and records its time and outcome.
step() {
  local name=$1 started status=0
  shift
  echo "== $name: $*"
  started=$(date +%s)
  "$@" >"$trial_dir/logs/$name.log" 2>&1 || status=$?
  local took=$(($(date +%s) - started))
  if [ "$status" = 0 ]; then
    summary+=("ok      ${took}s  $name")
  else
    summary+=("FAILED  ${took}s  $name (exit $status): see $trial_dir/logs/$name.log")
    echo "   failed (exit $status); last lines of $trial_dir/logs/$name.log:"
    tail -n 25 "$trial_dir/logs/$name.log" | sed 's/^/   | /'
  fi
  return "$status"
}

build_base() {
  local scratch="$trial_dir/.build-$suite"
  remove_tree "$scratch"
  # debootstrap mounts /proc and /sys in the target: a private namespace makes them die with it.
  unshare --mount --propagation private \
    debootstrap --variant=minbase "$suite" "$scratch" "$(debian_mirror)"
  # Like a container or chroot: package scripts must not start services.
  printf '#!/bin/sh\nexit 101\n' >"$scratch/usr/sbin/policy-rc.d"
  chmod 755 "$scratch/usr/sbin/policy-rc.d"
  remove_tree "$base"
  mv "$scratch" "$base"
}

finish() {
  if [ "$keep" = 0 ]; then
    remove_tree "$root" || true
  else
    echo "trial root kept in $root (enter it with: chroot $root)"
  fi
  echo
  echo "== fresh-machine trial ($suite, $(git -C "$repo" rev-parse --short HEAD)) summary:"
  printf '   %s\n' "${summary[@]}"
}
trap finish EXIT

if [ "$rebuild" = 1 ] || [ ! -x "$base/usr/bin/apt-get" ]; then
  step debootstrap build_base
else
  summary+=("cached      base root $base")
fi

remove_tree "$root"
step copy-root cp -a "$base" "$root"
cp /etc/hosts /etc/resolv.conf "$root/etc/"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi
step clone git clone --quiet "$repo" "$root/root/binlake"

# The README's commands: a failure is recorded and the next command still tried.
failed=0
step demo in_root sh -c 'cd /root/binlake && scripts/demo.sh' || failed=1
step setup-test in_root sh -c 'cd /root/binlake && scripts/setup.sh --test' || failed=1
step unit-tests in_root sh -c \
  'cd /root/binlake && .venv/bin/python -m pytest -m "not server and not spark" -q' || failed=1
if [ "$full" = 1 ]; then
  step test-sh in_root sh -c 'cd /root/binlake && scripts/test.sh' || failed=1
fi
exit "$failed"
