#!/usr/bin/env bash
# install.sh: installs nanolet from this tarball on a systemd machine that has containerd.
# Usage: sudo ./install.sh [--no-start]     (see --help)
set -euo pipefail

usage() {
  cat <<'EOF_USAGE'
Usage: ./install.sh [--no-start]

Installs (or upgrades) nanolet from this directory:
  nanolet          -> $PREFIX/bin/nanolet             (PREFIX=/usr/local)
  nanolet.8        -> $PREFIX/share/man/man8/nanolet.8
  nanolet.service  -> /etc/systemd/system/nanolet.service (ExecStart pointing at it)
  config.yaml      -> /etc/nanolet/config.yaml          (only if absent: yours is kept)
  default          -> /etc/default/nanolet              (NANOLET_ARGS; only if absent)
  and creates /etc/kubernetes/manifests.
Then, when systemd runs: daemon-reload, enable, and start on a fresh install, or restart on an
upgrade. Restarting nanolet does not restart pods (it adopts them).
  --no-start   install and enable only
DESTDIR=/some/root installs into another root (no systemctl then).
Needs containerd and runc (and the CNI plugins for pods without hostNetwork).
EOF_USAGE
}

start=1
for a in "$@"; do
  case "$a" in
    -h | --help) usage; exit 0 ;;
    --no-start) start=0 ;;
    *) echo "install.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prefix=${PREFIX:-/usr/local}
dest=${DESTDIR:-}
if [ -z "$dest" ] && [ "$(id -u)" -ne 0 ]; then
  echo "install.sh: run as root (or set DESTDIR)" >&2
  exit 1
fi
for c in containerd runc; do
  command -v "$c" >/dev/null 2>&1 || echo "install.sh: warning: $c not found; nanolet needs it" >&2
done

if [ -z "$dest" ] && ! "$here/nanolet" version >/dev/null; then
  echo "install.sh: $here/nanolet does not run on this machine (wrong architecture?)" >&2
  exit 1
fi
upgrade=0
[ -e "$dest$prefix/bin/nanolet" ] && upgrade=1

install -d -m 0755 "$dest$prefix/bin" "$dest$prefix/share/man/man8" "$dest/etc/systemd/system" \
  "$dest/etc/nanolet" "$dest/etc/default" "$dest/etc/kubernetes/manifests"
[ -e "$dest/etc/default/nanolet" ] || install -m 0644 "$here/default" "$dest/etc/default/nanolet"
install -m 0644 "$here/nanolet.8" "$dest$prefix/share/man/man8/nanolet.8"
# Replace the binary atomically (a running nanolet keeps its old inode).
install -m 0755 "$here/nanolet" "$dest$prefix/bin/.nanolet.new"
mv -f "$dest$prefix/bin/.nanolet.new" "$dest$prefix/bin/nanolet"
sed "s|^ExecStart=/usr/bin/nanolet |ExecStart=$prefix/bin/nanolet |" "$here/nanolet.service" \
  >"$dest/etc/systemd/system/nanolet.service"
chmod 0644 "$dest/etc/systemd/system/nanolet.service"
if [ -e "$dest/etc/nanolet/config.yaml" ]; then
  install -m 0644 "$here/config.yaml" "$dest/etc/nanolet/config.yaml.dist"
  echo "install.sh: kept /etc/nanolet/config.yaml; the shipped one is config.yaml.dist"
else
  install -m 0644 "$here/config.yaml" "$dest/etc/nanolet/config.yaml"
fi

if [ -z "$dest" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  systemctl enable nanolet.service
  if [ "$start" -eq 1 ]; then
    if [ "$upgrade" -eq 1 ]; then
      systemctl try-restart nanolet.service
    else
      systemctl start nanolet.service
    fi
  fi
elif [ -z "$dest" ]; then
  echo "install.sh: systemd is not running: start $prefix/bin/nanolet run --config /etc/nanolet/config.yaml yourself"
fi
echo "install.sh: installed nanolet into ${dest:-/}"
