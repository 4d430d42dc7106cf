#!/usr/bin/env bash
# Installs what nanolet's integration tests need to run a private containerd, if missing:
# containerd (+ ctr), runc, the CNI plugins (bridge, host-local, portmap, loopback),
# busybox-static (test images are built from it), iproute2, iptables (bridge/portmap),
# mount (umount for tear-down), tar/gzip/coreutils (image build), prometheus (only for
# promtool: tests/integration/api.rs checks /metrics with `promtool check metrics`), and the
# packaging tools (binutils, systemd for systemd-analyze and systemd-logind, lintian, init-system-helpers),
# gnuplot-nox (the benchmark's PNG charts), dbus-daemon, dbus-bin, python3-dbus and
# python3-gi (the graceful node shutdown test's private bus and stand-in logind), and kubectl
# (tests/integration/api.rs and kubectl.rs); make, bzip2 and docker-registry (scripts/upstream's
# busybox and scripts/conformance's registry); and the C toolchain the build needs (gcc, libc6-dev: see below).
#
# `--demo` installs only what building nanolet and scripts/demo need (the C toolchain,
# containerd, runc, the CNI plugins, busybox-static, iproute2, iptables, mount, tar, gzip,
# coreutils); without it, also everything the test suite uses.
#
# Idempotent and non-interactive; runs `apt-get update` only when something is missing.
# Needs root (or sudo) when it has to install anything.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
# shellcheck source=scripts/lib/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"
APT_WHO=install-deps

missing=()
need() { # package test...
  local pkg=$1; shift
  if ! "$@" >/dev/null 2>&1; then missing+=("$pkg"); fi
}
have() { command -v "$1"; }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'; }
static_busybox() { [ -x /bin/busybox ] && dpkg -s busybox-static 2>/dev/null | grep -q '^Status: install ok installed'; }

# The build (cargo build, scripts/demo, scripts/test) needs a C compiler and linker that a fresh
# Debian does not have: rustc links through `cc`, and the ring crate (rustls) compiles C and
# assembly with it. gcc brings cc and binutils (ld, as, ar); libc6-dev the C headers and the
# crt*.o/libc.so that linking needs (gcc only recommends it). No protoc: build.rs uses the
# vendored one.
need gcc have cc
need libc6-dev installed libc6-dev
need containerd have containerd
need containerd have ctr
need runc have runc
need containernetworking-plugins test -x /usr/lib/cni/bridge -a -x /usr/lib/cni/host-local -a -x /usr/lib/cni/portmap -a -x /usr/lib/cni/loopback
need busybox-static static_busybox
need iproute2 have ip
need iptables have iptables
need mount have umount
need tar have tar
need gzip have gzip
need coreutils have sha256sum

# Everything below is for the test suite only; `--demo` (scripts/demo, the README's first
# command) stops here: building nanolet and running pods on a private containerd needs no more.
demo_only=0
[ "${1:-}" = --demo ] && demo_only=1
need_kubectl=
need_go=
# A Go >= 1.21 on PATH or where Debian's golang-1.2x-go packages put it (scripts/upstream
# looks in the same places).
go_ok() {
  local g v
  for g in "$(command -v go 2>/dev/null)" /usr/local/go/bin/go /usr/lib/go-1.2[1-9]/bin/go; do
    [ -n "$g" ] && [ -x "$g" ] || continue
    v=$("$g" env GOVERSION 2>/dev/null | sed 's/^go//')
    case "$v" in 1.2[1-9]* | 1.[3-9][0-9]* | [2-9].*) return 0 ;; esac
  done
  return 1
}
if [ "$demo_only" -eq 0 ]; then
  need prometheus have promtool
  # Packaging (packaging/test-deb, tests/integration/upgrade.rs): readelf/strip for build-deb,
  # the unit check (systemd-analyze verify), lintian, deb-systemd-helper for the maintainer
  # scripts, zsh to drive the packaged zsh completion.
  need binutils have readelf
  need zsh have zsh
  need systemd have systemd-analyze
  need lintian have lintian
  need init-system-helpers have deb-systemd-helper
  # Benchmark charts (scripts/bench draws results/*.png with gnuplot).
  need gnuplot-nox have gnuplot
  # tests/integration/security.rs: the HTTPS manifest-URL test makes its PKI with openssl and
  # serves with python3. src/certificate's unit tests check our keys, CSRs and certificates with
  # the openssl CLI; the API-server double signs CSRs with it; the kubelet-server tests
  # (src/server/secure_tests.rs, tests/integration/{secure_port,cluster_node}.rs) ask with curl.
  need openssl have openssl
  need curl have curl
  need python3 have python3
  # tests/integration/nodeshutdown.rs: a private bus (dbus-daemon, dbus-send) with a stand-in
  # logind (tests/support/logind_standin.py) on Debian's python3 with python3-dbus and GLib.
  need dbus-daemon have dbus-daemon
  need dbus-bin have dbus-send
  need python3-dbus /usr/bin/python3 -c 'import dbus'
  need python3-gi /usr/bin/python3 -c 'from gi.repository import GLib'
  # The same test with the real logind: Debian's systemd package ships
  # /lib/systemd/systemd-logind (a systemd stand-in, tests/support/systemd_standin.py, plays PID 1).
  need systemd test -x /lib/systemd/systemd-logind
  # tests/integration/images.rs (archives that real tools write): skopeo writes oci-archive
  # (gzip and zstd layers) and docker-archive tarballs, podman builds and saves images
  # (`podman save`, both formats); the `ctr images export` archives need only containerd's
  # ctr, above.
  need skopeo have skopeo
  need podman have podman
  # kubectl (tests/integration/api.rs and kubectl.rs): the `kubectl` package where a
  # Kubernetes apt repository provides it (pkgs.k8s.io), else Debian's `kubernetes-client`;
  # chosen after `apt-get update` (a fresh machine has no package lists yet).
  have kubectl >/dev/null 2>&1 || need_kubectl=1
  # scripts/upstream builds the upstream peers the suite also runs against (containerd 1.7 and
  # 2.x, runc: docs/testing.md, "Runtimes") from Go modules: Go >= 1.21 (it fetches the newer
  # toolchain a pin asks for from the Go module proxy) and, for runc's seccomp (cgo),
  # libseccomp-dev and pkg-config.
  need libseccomp-dev installed libseccomp-dev
  need pkg-config have pkg-config
  # scripts/upstream builds the e2e images' busybox from its release tarball (make, bzip2;
  # gcc and libc6-dev above); scripts/conformance runs a real registry for the suite's pulls
  # (Debian's docker-registry: the distribution project's registry).
  need make have make
  need bzip2 have bzip2
  need docker-registry have docker-registry
  go_ok || need_go=1
fi

if [ ${#missing[@]} -eq 0 ] && [ -z "$need_kubectl" ] && [ -z "$need_go" ]; then
  echo "install-deps: everything present"
  exit 0
fi

# De-duplicate (containerd appears twice when both binaries are missing).
sudo=
if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
if [ -n "$need_go" ]; then
  # Debian 12's own Go is 1.19 (too old to fetch a newer toolchain); bookworm-backports has
  # golang-1.23-go. Debian 13 and later have a new enough golang-go.
  . /etc/os-release
  if [ "${VERSION_CODENAME:-}" = bookworm ]; then
    bp=/etc/apt/sources.list.d/nanolet-bookworm-backports.sources
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      echo "install-deps: adding bookworm-backports for golang-1.23-go ($bp)"
      printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
        'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' |
        $sudo tee "$bp" >/dev/null
    fi
    missing+=(golang-1.23-go)
  else
    missing+=(golang-go)
  fi
fi
APT_SUDO=$sudo
# Retried, and a failed index (one this script may not need) is a warning: apt_install below
# fails, with a line naming the package, only if something needed cannot be installed.
apt_update
if [ -n "$need_kubectl" ]; then
  if apt-cache policy kubectl 2>/dev/null | grep -q 'Candidate: [^(]'; then
    missing+=(kubectl)
  else
    missing+=(kubernetes-client)
  fi
fi
mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)
echo "install-deps: installing ${pkgs[*]}"
apt_install "${pkgs[@]}" || exit 1

# containerd's Debian package enables a system-wide daemon; the tests run their own private
# one and do not need it, but leave the system service as the package set it up.
echo "install-deps: done"
