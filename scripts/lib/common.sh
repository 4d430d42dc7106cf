# shellcheck shell=bash
# Shared helpers for scripts/demo, scripts/test and .ci/run. Source it; do not run it.

# The repository root (this file lives in scripts/lib/).
NANOLET_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

say() { printf '%s: %s\n' "${NANOLET_PROG:-nanolet}" "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Makes rustup's cargo findable even when sudo or a login shell dropped ~/.cargo/bin from PATH.
find_cargo() {
  local d
  for d in "${CARGO_HOME:-}/bin" "${HOME:-/root}/.cargo/bin" /root/.cargo/bin; do
    if [ -n "$d" ] && [ -x "$d/cargo" ] && ! command -v cargo >/dev/null 2>&1; then
      PATH="$d:$PATH"
    fi
  done
  export PATH
  command -v cargo >/dev/null 2>&1 ||
    die "cargo not found: install Rust with rustup (https://rustup.rs) and make sure ~/.cargo/bin is on PATH"
}

# Runs scripts/install-deps.sh as root: directly when root, else through sudo (non-interactive
# when there is no terminal), else fails with a clear message.
install_deps() { # [--demo]: only what the demo needs
  local script="$NANOLET_REPO/scripts/install-deps.sh"
  if [ "$(id -u)" -eq 0 ]; then
    bash "$script" "$@"
  elif command -v sudo >/dev/null 2>&1; then
    if [ -t 0 ]; then sudo bash "$script" "$@"; else sudo -n bash "$script" "$@"; fi ||
      die "installing dependencies with sudo failed (run 'sudo $script' yourself, then retry)"
  else
    die "installing dependencies needs root: run as root, or install sudo"
  fi
}

# pid -> parent pid, for every process (from /proc/*/stat; the comm field may contain spaces).
declare -A NANOLET_PPID=()
scan_procs() {
  NANOLET_PPID=()
  local stat pid rest
  for stat in /proc/[0-9]*/stat; do
    pid=${stat#/proc/}; pid=${pid%/stat}
    rest=$(cat "$stat" 2>/dev/null) || continue
    rest=${rest##*) }                # "S PPID ..."
    rest=${rest#* }                  # "PPID ..."
    NANOLET_PPID[$pid]=${rest%% *}
  done
}

# Prints the pids of processes whose NUL-separated command line contains every given string.
pids_matching() {
  local f pid cmd s ok
  for f in /proc/[0-9]*/cmdline; do
    pid=${f#/proc/}; pid=${pid%/cmdline}
    [ "$pid" = "$$" ] && continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
    [ -n "$cmd" ] || continue
    ok=1
    for s in "$@"; do
      case "$cmd" in *"$s"*) ;; *) ok=0; break ;; esac
    done
    [ "$ok" -eq 1 ] && echo "$pid"
  done
  return 0
}

# Prints all descendants of the given pids (children first does not matter: all get SIGKILL).
descendants() {
  scan_procs
  local -a frontier=("$@") out=()
  local p c
  while [ ${#frontier[@]} -gt 0 ]; do
    p=${frontier[-1]}; unset 'frontier[-1]'
    for c in "${!NANOLET_PPID[@]}"; do
      if [ "${NANOLET_PPID[$c]}" = "$p" ]; then out+=("$c"); frontier+=("$c"); fi
    done
  done
  [ ${#out[@]} -eq 0 ] || printf '%s\n' "${out[@]}"
}

# Sends SIGKILL to the given pids and all their descendants, then waits (bounded) until gone.
kill_tree() {
  [ $# -gt 0 ] || return 0
  local -a all
  mapfile -t all < <(descendants "$@")
  all+=("$@")
  kill -KILL "${all[@]}" 2>/dev/null || true
  local i p
  for i in $(seq 50); do
    for p in "${all[@]}"; do [ -d "/proc/$p" ] && break; p=; done
    [ -z "${p:-}" ] && return 0
    sleep 0.1
  done
  say "warning: processes still alive after SIGKILL: ${all[*]}"
}

# Sends SIGTERM to a pid, waits up to $2 seconds, then SIGKILL. Returns once it is gone.
stop_pid() {
  local pid=$1 secs=${2:-10} i
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq $((secs * 10))); do
    [ -d "/proc/$pid" ] || return 0
    # A zombie child of ours counts as gone; `wait` reaps it below.
    [ "$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null)" = Z ] && return 0
    sleep 0.1
  done
  say "pid $pid ignored SIGTERM for ${secs}s: sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
}

# Lazily unmounts everything mounted at or below each given directory, deepest/latest first.
unmount_under() {
  local dir m
  local -a points=()
  for dir in "$@"; do
    [ -n "$dir" ] || continue
    # Field 5 of mountinfo is the mount point (octal escapes for space, tab, newline, backslash).
    while read -r m; do
      m=$(printf '%b' "${m//\\/\\0}")
      case "$m" in "$dir" | "$dir"/*) points+=("$m") ;; esac
    done < <(awk '{print $5}' /proc/self/mountinfo)
  done
  local i
  for ((i = ${#points[@]} - 1; i >= 0; i--)); do
    umount -l "${points[i]}" 2>/dev/null || true
  done
}

# Minimal HTTP GET without curl (not on a fresh Debian): prints the response body, fails unless
# the status is 2xx. Usage: http_get HOST PORT PATH [TIMEOUT_SECONDS]
http_get() {
  local host=$1 port=$2 path=$3 t=${4:-3}
  # shellcheck disable=SC2016 # the script runs in the child bash
  timeout "$t" bash -c '
    exec 3<>"/dev/tcp/$0/$1" || exit 1
    printf "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n" "$2" "$0" >&3
    IFS= read -r status <&3 || exit 1
    case "$status" in "HTTP/1."?" 2"*) ;; *) exit 1 ;; esac
    while IFS= read -r line <&3; do [ "${line%$'"'"'\r'"'"'}" = "" ] && break; done
    cat <&3
  ' "$host" "$port" "$path"
}
