#!/usr/bin/env bash
# Installs what nanolet's integration tests need to run a private containerd, if missing:
# containerd (+ ctr), runc, the CNI plugins (bridge, host-local, portmap, loopback),
# busybox-static (test images are built from it), iproute2, iptables (bridge/portmap),
# mount (umount for tear-down), tar/gzip/coreutils (image build), prometheus (only for
# promtool: tests/integration/api.rs checks /metrics with `promtool check metrics`), and the
# packaging tools (binutils, systemd for systemd-analyze, lintian, init-system-helpers),
# gnuplot-nox (the benchmark's PNG charts), dbus-daemon, dbus-bin, python3-dbus and
# python3-gi (the graceful node shutdown test's private bus and stand-in logind), and kubectl
# (tests/integration/api.rs and kubectl.rs); and the C toolchain the build needs (gcc, libc6-dev: see below).
#
# `--demo` installs only what building nanolet and scripts/demo need (the C toolchain,
# containerd, runc, the CNI plugins, busybox-static, iproute2, iptables, mount, tar, gzip,
# coreutils); without it, also everything the test suite uses.
#
# Idempotent and non-interactive; runs `apt-get update` only when something is missing.
# Needs root (or sudo) when it has to install anything.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

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
fi

if [ ${#missing[@]} -eq 0 ] && [ -z "$need_kubectl" ]; then
  echo "install-deps: everything present"
  exit 0
fi

# De-duplicate (containerd appears twice when both binaries are missing).
sudo=
if [ "$(id -u)" -ne 0 ]; then sudo=sudo; fi
$sudo apt-get update -q
if [ -n "$need_kubectl" ]; then
  if apt-cache policy kubectl 2>/dev/null | grep -q 'Candidate: [^(]'; then
    missing+=(kubectl)
  else
    missing+=(kubernetes-client)
  fi
fi
mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)
echo "install-deps: installing ${pkgs[*]}"
$sudo apt-get install -y -q --no-install-recommends "${pkgs[@]}"

# containerd's Debian package enables a system-wide daemon; the tests run their own private
# one and do not need it, but leave the system service as the package set it up.
echo "install-deps: done"
