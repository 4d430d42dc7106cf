# scripts/lib/apt.sh: the apt steps of scripts/install-deps.sh, scripts/fresh-machine-check,
# scripts/heap-profile and cross/env.sh (sourced, not run). Debian mirrors fail single indexes
# while they sync ("File has unexpected size ... Mirror sync in progress?"), often one nanolet
# does not need (another architecture's, -security's): every download is retried
# (Acquire::Retries), a failed `apt-get update` is a warning, and only an install that cannot
# get a needed package fails, with one line naming it.
#
# APT_SUDO: a command prefix (sudo) when not root; APT_WHO: the name that starts each line.

APT_OPTS=(-o Acquire::Retries=3)

# apt-get update; failed indexes are reported and ignored (the install decides).
apt_update() {
  if ! ${APT_SUDO:-} apt-get "${APT_OPTS[@]}" update -q; then
    echo "${APT_WHO:-apt}: warning: apt-get update failed for some index (a mirror mid-sync?);" \
      "going on with the package lists there are" >&2
  fi
}

# apt-get install PKG...; on failure, one line naming the packages apt has no candidate for.
apt_install() {
  if ${APT_SUDO:-} apt-get "${APT_OPTS[@]}" install -y -q --no-install-recommends "$@"; then
    return 0
  fi
  local p missing=()
  for p in "$@"; do
    apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [^(]' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "${APT_WHO:-apt}: error: cannot install ${missing[*]}: no installable version in the" \
      "package lists (a failed index above, or a missing apt source)" >&2
  else
    echo "${APT_WHO:-apt}: error: apt-get install $* failed (see apt's messages above)" >&2
  fi
  return 1
}
