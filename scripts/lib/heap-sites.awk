# Sums heaptrack_print's unmerged "leaked" backtraces (--merge-backtraces=0) by allocation site:
# the first two of nanolet's own frames (at src/...; derived Clone impls in src/api/types.rs
# and elsewhere skipped, so a copy is named by the code that makes it).
function flush() {
  if (bytes > 0) { key = (n >= 1 ? f[1] : "(no nanolet frame: " last ")") (n >= 2 ? " < " f[2] : ""); sum[key] += bytes; total += bytes }
  bytes = 0; n = 0; fn = ""; last = ""
}
/ leaked over [0-9]+ calls/ {
  flush()
  v = $1; u = substr(v, length(v)); v = substr(v, 1, length(v) - 1) + 0
  bytes = v * (u == "K" ? 1e3 : u == "M" ? 1e6 : u == "G" ? 1e9 : 1) # heaptrack prints SI units
  next
}
/^  +at / {
  loc = $2
  if (loc ~ /^src\// && fn !~ /^clone(<>)?$|[Cc]lone\$GT\$::clone/ && n < 2) f[++n] = fn " " loc
  next
}
/^  +in / { next }
/^  +[^ ]/ { fn = $1; last = $1; next }
END {
  flush()
  printf "%10s  %s\n", "KiB", "site (first nanolet frames)"
  for (k in sum) printf "%10.1f  %s\n", sum[k] / 1024, k | "sort -rn | head -n " (top ? top : 30)
  close("sort -rn | head -n " (top ? top : 30))
  printf "%10.1f  total live (KiB)\n", total / 1024
}
