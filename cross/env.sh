# shellcheck shell=bash
# cross/env.sh: shared by cross/build and cross/smoke (sourced, not run).
#
# The cross toolchain is Debian bookworm's Rust 1.85 (the crate's MSRV) with the ARM standard
# libraries, because rustup here has only the x86_64 std. Everything is pinned to one version.

CROSS_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEB_RUST_VERSION=1.85.0+dfsg3-1~deb12u3
# Debian's cargo and rustc, not rustup's (which come first in PATH).
# shellcheck disable=SC2034 # used by the scripts that source this file
DEB_CARGO=/usr/bin/cargo
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
# Own target dir so cross builds never wait on (or clobber) the native build's lock in target/.
export CARGO_TARGET_DIR="${CROSS_TARGET_DIR:-$CROSS_REPO/target-cross}"
export DEBIAN_FRONTEND=noninteractive

# Linkers and C compilers (ring, pulled in by rustls, compiles C and assembly) per target.
# Set through the environment rather than .cargo/config.toml so native builds are untouched.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
export CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_LINKER=arm-linux-gnueabihf-gcc
export CC_armv7_unknown_linux_gnueabihf=arm-linux-gnueabihf-gcc
export AR_armv7_unknown_linux_gnueabihf=arm-linux-gnueabihf-ar
# Test binaries run under qemu-user (`cargo test --target ...`). No -L: libc6:arm64/armhf
# (multiarch, pulled in by the ARM std packages) provide /lib/ld-linux-*.so.* and the libraries
# in the normal paths. With only `-L /usr/<triple>` threaded programs hang or crash.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64-static
export CARGO_TARGET_ARMV7_UNKNOWN_LINUX_GNUEABIHF_RUNNER=qemu-arm-static

say() { printf '%s: %s\n' "${CROSS_PROG:-cross}" "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Short name (aarch64, armv7, x86_64) or triple -> triple.
triple_of() {
  case "$1" in
    aarch64 | arm64 | aarch64-unknown-linux-gnu) echo aarch64-unknown-linux-gnu ;;
    armv7 | armhf | armv7-unknown-linux-gnueabihf) echo armv7-unknown-linux-gnueabihf ;;
    x86_64 | amd64 | x86_64-unknown-linux-gnu) echo x86_64-unknown-linux-gnu ;;
    *) return 1 ;;
  esac
}

# Triple -> qemu-user binary ("" for the host).
qemu_of() {
  case "$1" in
    aarch64-unknown-linux-gnu) echo qemu-aarch64-static ;;
    armv7-unknown-linux-gnueabihf) echo qemu-arm-static ;;
    *) echo "" ;;
  esac
}

# Installs the pinned toolchain if anything is missing. Idempotent; apt-get runs only when needed.
# With --native-only: just Debian's Rust 1.85 for the build machine's own architecture (and gcc
# to link), what scripts/msrv-check needs; without: also the ARM std libraries, cross gcc, qemu.
install_toolchain() {
  local v=$DEB_RUST_VERSION missing=() p native_only=0
  [ "${1:-}" = --native-only ] && native_only=1
  local pkgs=("rustc-web=$v" "cargo-web=$v" "libstd-rust-web-dev=$v")
  local tools=(gcc libc6-dev)
  if [ "$native_only" -eq 0 ]; then
    pkgs+=("libstd-rust-web-dev:arm64=$v" "libstd-rust-web-dev:armhf=$v")
    tools+=(gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf libc6-dev-arm64-cross
      libc6-dev-armhf-cross qemu-user-static)
  fi
  local native name
  native=$(dpkg --print-architecture)
  for p in "${pkgs[@]}"; do
    name=${p%%=*}
    [[ $name == *:* ]] || name="$name:$native"
    [ "$(dpkg-query -W -f='${Version}' "$name" 2>/dev/null || true)" = "$v" ] || missing+=("$p")
  done
  for p in "${tools[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || die "missing packages (${missing[*]}) and not root: run as root once"
  say "installing: ${missing[*]}"
  if [ "$native_only" -eq 0 ]; then
    local archs
    archs=$(dpkg --print-foreign-architectures)
    grep -qx arm64 <<<"$archs" || dpkg --add-architecture arm64
    grep -qx armhf <<<"$archs" || dpkg --add-architecture armhf
  fi
  # A mirror in the middle of a sync can fail one index; the pinned packages come from the
  # bookworm release itself, so go on and let apt-get install decide.
  apt-get -o Acquire::Retries=3 update -q ||
    say "warning: apt-get update reported errors; trying the install anyway"
  local apt_install=(apt-get -o Acquire::Retries=3 install -y -q --no-install-recommends)
  if ! "${apt_install[@]}" "${missing[@]}"; then
    # The ARM std packages depend on liblzma5 of the same version on every architecture
    # (Multi-Arch: same); the amd64 one may be newer (security) than the arm64/armhf ones.
    local lz
    lz=$(apt-cache policy liblzma5:arm64 | sed -n 's/^ *Candidate: //p')
    if [ -z "$lz" ] || [ "$lz" = "(none)" ]; then
      die "apt-get install failed"
    fi
    say "retrying with liblzma5 pinned to $lz on amd64, arm64 and armhf"
    "${apt_install[@]}" --allow-downgrades "${missing[@]}" \
      "liblzma5=$lz" "liblzma5:arm64=$lz" "liblzma5:armhf=$lz"
  fi
  [ "$("$RUSTC" --version | cut -d' ' -f2)" = 1.85.0 ] || die "$RUSTC is not rustc 1.85.0"
}
