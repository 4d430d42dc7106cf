#!/usr/bin/env bash
# Builds the local test images from Debian's busybox-static, as OCI image-layout archives that
# `ctr images import` understands:
#
#   OUTDIR/busybox.tar  ->  localhost/busybox:1.36   (default Cmd: sh)
#   OUTDIR/pause.tar    ->  localhost/pause:3.9      (sleeps until SIGTERM/SIGINT, exits 0)
#
# Both share one layer: /bin/.busybox-static plus one relative symlink per applet in /bin (never
# one named "busybox", which would loop), /usr/bin/env, /etc/passwd, /etc/group and empty
# /tmp /proc /sys /dev /etc /root /var dirs. Everything is deterministic (sorted entries, fixed
# mtimes and owners, gzip -n), so image digests only change when busybox or this script does.
#
# Needs only bash, coreutils, GNU tar, gzip and sha256sum.
# Usage: scripts/build-images.sh OUTDIR
#        scripts/build-images.sh --kube-proxy KUBE_PROXY OUTDIR
#        scripts/build-images.sh --e2e BINDIR SRCDIR OUTDIR
#
# --kube-proxy: OUTDIR/kube-proxy.tar -> localhost/kube-proxy:<its version> (the real-cluster
# tests' kube-proxy DaemonSet, tests/integration/real_cluster.rs): the busybox layer plus one
# with the kube-proxy binary scripts/upstream built, and this host's iptables (the nft backend,
# as Debian's `iptables` is) with the shared libraries and xtables extensions it loads.
#
# --e2e: the images of the Kubernetes e2e suite (scripts/conformance) as OUTDIR/e2e-*.tar, from
# BINDIR (`scripts/upstream path e2e-images`: agnhost, nonewprivs) and SRCDIR (the pinned
# kubernetes source, for agnhost's porter certificate); see the list at the --e2e block below.
set -euo pipefail

kube_proxy= e2e_bin= e2e_src=
if [ "${1:-}" = --kube-proxy ]; then
  kube_proxy=${2:?usage: $0 --kube-proxy KUBE_PROXY OUTDIR}
  shift 2
elif [ "${1:-}" = --e2e ]; then
  e2e_bin=${2:?usage: $0 --e2e BINDIR SRCDIR OUTDIR}
  e2e_src=${3:?usage: $0 --e2e BINDIR SRCDIR OUTDIR}
  shift 3
fi
out=${1:?usage: $0 OUTDIR}
busybox=${BUSYBOX:-/bin/busybox}
[ -x "$busybox" ] || { echo "build-images: $busybox missing; run scripts/install-deps.sh" >&2; exit 1; }

case "$(uname -m)" in
  x86_64) arch=amd64 variant= ;;
  aarch64|arm64) arch=arm64 variant= ;;
  armv7l|armv8l) arch=arm variant=v7 ;;
  armv6l) arch=arm variant=v6 ;;
  i?86) arch=386 variant= ;;
  *) arch=$(uname -m) variant= ;;
esac
platform="\"architecture\":\"$arch\",\"os\":\"linux\""
[ -n "$variant" ] && platform="$platform,\"variant\":\"$variant\""

mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/nanolet-images.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Deterministic tar of a directory's contents (no leading ./).
dtar() { # dir output
  (cd "$1" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort) >"$work/list"
  tar -C "$1" --no-recursion --format=posix \
      --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
      --mtime=@0 --owner=0 --group=0 --numeric-owner \
      -cf "$2" -T "$work/list"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }
size() { stat -c %s "$1"; }

# ---- rootfs ----
root="$work/rootfs"
mkdir -p "$root"/{bin,usr/bin,etc,tmp,proc,sys,dev,root,var}
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/.busybox-static"
chmod 0755 "$root/bin/.busybox-static"
"$busybox" --list | while read -r applet; do
  case "$applet" in busybox|""|*/*) continue ;; esac
  ln -s .busybox-static "$root/bin/$applet"
done
ln -s ../../bin/env "$root/usr/bin/env"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
find "$root" -exec touch -h -d @0 {} +

# ---- layer (shared) ----
blobs="$work/blobs"
mkdir -p "$blobs"
dtar "$root" "$work/layer.tar"
diff_id=$(sha "$work/layer.tar")
gzip -n -9 -c "$work/layer.tar" >"$work/layer.tar.gz"
layer_digest=$(sha "$work/layer.tar.gz")
layer_size=$(size "$work/layer.tar.gz")

# Layers beyond the busybox one (the kube-proxy image's): digest, diff id and size each.
extra_layers=()

# image NAME TAG CMD_JSON OUTFILE [ENTRYPOINT_JSON [USER]]
image() {
  local name=$1 tag=$2 cmd=$3 outfile=$4 entrypoint=${5:-} user=${6:-}
  local d="$work/$name" cfg mf idx l diff_ids layers
  mkdir -p "$d/blobs/sha256"
  cp "$work/layer.tar.gz" "$d/blobs/sha256/$layer_digest"
  diff_ids="\"sha256:$diff_id\""
  layers="{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$layer_digest\",\"size\":$layer_size}"
  for l in "${extra_layers[@]}"; do
    set -- $l # digest diff_id size
    cp "$work/extra-$1.tar.gz" "$d/blobs/sha256/$1"
    diff_ids="$diff_ids,\"sha256:$2\""
    layers="$layers,{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:$1\",\"size\":$3}"
  done

  local path=/bin:/usr/bin:/sbin:/usr/sbin
  [ ${#extra_layers[@]} -eq 0 ] || path=/usr/local/bin:$path
  local extra_cfg=
  [ -z "$entrypoint" ] || extra_cfg="$extra_cfg,\"Entrypoint\":$entrypoint"
  [ -z "$user" ] || extra_cfg="$extra_cfg,\"User\":\"$user\""
  printf '{%s,"config":{"Env":["PATH=%s"],"Cmd":%s,"WorkingDir":"/"%s},"rootfs":{"type":"layers","diff_ids":[%s]}}' \
    "$platform" "$path" "$cmd" "$extra_cfg" "$diff_ids" >"$d/config.json"
  cfg=$(sha "$d/config.json")
  mv "$d/config.json" "$d/blobs/sha256/$cfg"

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[%s]}' \
    "$cfg" "$(size "$d/blobs/sha256/$cfg")" "$layers" >"$d/manifest.json"
  mf=$(sha "$d/manifest.json")
  mv "$d/manifest.json" "$d/blobs/sha256/$mf"

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s:%s","org.opencontainers.image.ref.name":"%s"},"platform":{%s}}]}' \
    "$mf" "$(size "$d/blobs/sha256/$mf")" "$name" "$tag" "$tag" "$platform" >"$d/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$d/oci-layout"
  find "$d" -exec touch -h -d @0 {} +

  dtar "$d" "$outfile.tmp"
  mv "$outfile.tmp" "$outfile"
  echo "built $name:$tag ($outfile, manifest sha256:$mf)"
}

pause_cmd='["sh","-c","trap \"exit 0\" TERM INT; while :; do sleep 3600 & wait; done"]'

# extra_layer DIR: DIR's contents (mtimes and owners fixed) become a layer above the busybox
# one for the images built after this call (until extra_layers is emptied).
extra_layer() {
  local x=$1 xdiff xdigest
  find "$x" -exec touch -h -d @0 {} +
  dtar "$x" "$work/extra.tar"
  xdiff=$(sha "$work/extra.tar")
  gzip -n -9 -c "$work/extra.tar" >"$work/extra.tar.gz"
  xdigest=$(sha "$work/extra.tar.gz")
  mv "$work/extra.tar.gz" "$work/extra-$xdigest.tar.gz"
  extra_layers+=("$xdigest $xdiff $(size "$work/extra-$xdigest.tar.gz")")
}

if [ -n "$e2e_bin" ]; then
  # The images the Kubernetes e2e suite's node tests run (scripts/conformance), under the names
  # and tags of its test/utils/image/manifest.go (v1.36.3), so nothing is pulled. What each is
  # (docs/conformance.md, "Images"):
  #   busybox:1.37.0-1  the busybox layer (upstream: busybox itself), Cmd sh. scripts/conformance
  #                     sets BUSYBOX to upstream's busybox 1.37.0 (`scripts/upstream path
  #                     busybox`), so every image here has the suite's busybox, not Debian's
  #   pause:3.10.2      the pause command above (upstream: a static /pause; tests only need a
  #                     container that runs until stopped)
  #   agnhost:2.63.0    agnhost built from its source in the pinned module (bin/agnhost), at
  #                     /agnhost with the agnhost-2 link, /uploads, porter's localhost.crt/key, the
  #                     user-defined-in-image (1000) and group-defined-in-image (50000) of its
  #                     Dockerfile; this host's curl, bash and dash (as /bin/sh); OpenBSD nc from
  #                     E2E_DEBS; wget and the rest from busybox instead of Alpine's packages.
  #                     Also tagged 2.55 (AgnhostPrev: tests only need a second tag)
  #   nonewprivs:1.4    bin/nonewprivs (nnp.go) setuid root at /usr/local/bin/nnp, Cmd nnp
  #   nonroot:1.5       the busybox layer with USER 1234
  #   kitten:1.8        agnhost with the kitten image's two files (below)
  #   glibc-dns-testing:2.0.0  the busybox layer with this host's (Debian's, glibc) hostname
  #                     and the libraries it loads, and an nsswitch.conf with `hosts: files
  #                     dns` (upstream: a Debian image): `hostname -f` resolves through glibc
  #                     as there (the HostnameOverride tests)
  #   nginx             with nginx's packages in E2E_DEBS only, below
  # E2E_DEBS: a directory of Debian packages fetched with `apt-get download` (scripts/conformance):
  # nginx, nginx-common, netcat-openbsd; an image or tool whose package is missing is left out.
  e2e=registry.k8s.io/e2e-test-images
  for b in agnhost nonewprivs; do
    [ -x "$e2e_bin/$b" ] || { echo "build-images: $e2e_bin/$b missing (scripts/upstream path e2e-images)" >&2; exit 1; }
  done
  image "$e2e/busybox" 1.37.0-1 '["sh"]' "$out/e2e-busybox.tar"
  image registry.k8s.io/pause 3.10.2 "$pause_cmd" "$out/e2e-pause.tar"
  image "$e2e/nonroot" 1.5 '["sh"]' "$out/e2e-nonroot.tar" "" 1234
  x="$work/glibc-dns"
  mkdir -p "$x/bin" "$x/etc"
  hostname_bin=$(command -v hostname) || { echo "build-images: hostname missing (apt install hostname)" >&2; exit 1; }
  cp "$hostname_bin" "$x/bin/hostname"
  printf 'hosts: files dns\n' >"$x/etc/nsswitch.conf"
  ldd "$hostname_bin" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u | while read -r lib; do
    mkdir -p "$x$(dirname "$lib")"
    cp -L "$lib" "$x$lib"
  done
  extra_layer "$x"
  image "$e2e/glibc-dns-testing" 2.0.0 '["sh"]' "$out/e2e-glibc-dns-testing.tar"
  extra_layers=()
  x="$work/nnp"
  mkdir -p "$x/usr/local/bin"
  cp "$e2e_bin/nonewprivs" "$x/usr/local/bin/nnp"
  chmod 4755 "$x/usr/local/bin/nnp"
  extra_layer "$x"
  image "$e2e/nonewprivs" 1.4 '["nnp"]' "$out/e2e-nonewprivs.tar"
  extra_layers=()
  x="$work/agnhost"
  mkdir -p "$x/uploads" "$x/etc"
  cp "$e2e_bin/agnhost" "$x/agnhost"
  ln -s agnhost "$x/agnhost-2"
  cp "$e2e_src/test/images/agnhost/porter/localhost.crt" "$e2e_src/test/images/agnhost/porter/localhost.key" "$x/"
  cat "$root/etc/passwd" >"$x/etc/passwd"
  echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh' >>"$x/etc/passwd"
  cat "$root/etc/group" >"$x/etc/group"
  printf '%s\n' 'user-defined-in-image:x:1000:' 'group-defined-in-image:x:50000:user-defined-in-image' >>"$x/etc/group"
  # curl and bash (Alpine's packages upstream): tests' hooks and probes run `sh -c "curl ..."`
  # in agnhost, the Probing container readiness-while-terminating tests `/bin/bash -c ...`.
  # This host's (Debian's) curl and bash with the shared libraries they load, at their paths
  # (busybox has no bash applet; /bin/bash replaces nothing of the busybox layer).
  curl_bin=$(command -v curl) || { echo "build-images: curl missing (apt install curl)" >&2; exit 1; }
  [ -x /bin/bash ] || { echo "build-images: /bin/bash missing" >&2; exit 1; }
  mkdir -p "$x/usr/bin" "$x/bin"
  cp "$curl_bin" "$x/usr/bin/curl"
  cp /bin/bash "$x/bin/bash"
  # nc: Alpine's netcat-openbsd upstream. busybox's nc has no -u; the Networking Granular
  # Checks' node-pod udp test sends `echo hostName | nc -w 1 -u IP PORT` from a host-network
  # agnhost. Debian's netcat-openbsd at /bin/nc, replacing busybox's applet link, with the
  # libraries it loads. /bin/sh is this host's dash: Debian's busybox-static ash runs its own
  # applet for every name it has (FEATURE_SH_STANDALONE) whatever PATH holds, so `sh -c "...
  # nc ..."` would never reach /bin/nc; Alpine's ash (upstream's /bin/sh), like dash, looks
  # commands up in PATH.
  [ -x /bin/dash ] || { echo "build-images: /bin/dash missing" >&2; exit 1; }
  cp /bin/dash "$x/bin/sh"
  nc_bin=
  for deb in "${E2E_DEBS:-/nonexistent}"/netcat-openbsd_*.deb; do
    [ -f "$deb" ] || continue
    dpkg-deb -x "$deb" "$work/nc-deb"
    cp "$work/nc-deb/bin/nc.openbsd" "$x/bin/nc"
    nc_bin=$x/bin/nc
  done
  { ldd "$curl_bin"; ldd /bin/bash; ldd /bin/dash; [ -z "$nc_bin" ] || ldd "$nc_bin"; } | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u | while read -r lib; do
    mkdir -p "$x$(dirname "$lib")"
    cp -L "$lib" "$x$lib"
  done
  # /var/registry, which `agnhost fake-registry-server` serves (the private-registry tests:
  # localhost:5000/pause:testing). Upstream's image build fills it with prepare_registry.sh
  # (crane downloads images.txt's `pause 3.10.2 testing`); here the pause image built above, in
  # the layout the server reads: manifests/<tag> holds the manifest's digest, manifests/ and
  # blobs/ hold each object at sha256/<first two hex digits>/<hash>/data.
  pause_dir="$work/registry.k8s.io/pause" reg="$x/var/registry/pause"
  mf=$(grep -o '"digest":"sha256:[0-9a-f]*"' "$pause_dir/index.json" | head -n1 | sed 's/.*sha256:\([0-9a-f]*\)"/\1/')
  [ -n "$mf" ] || { echo "build-images: no manifest in $pause_dir/index.json" >&2; exit 1; }
  for b in "$pause_dir"/blobs/sha256/*; do
    h=$(basename "$b") kind=blobs
    [ "$h" = "$mf" ] && kind=manifests
    mkdir -p "$reg/$kind/sha256/${h:0:2}/$h"
    cp "$b" "$reg/$kind/sha256/${h:0:2}/$h/data"
  done
  echo "sha256:$mf" >"$reg/manifests/testing"
  chmod -R a+rX "$x/var/registry"
  extra_layer "$x"
  image "$e2e/agnhost" 2.63.0 '["pause"]' "$out/e2e-agnhost.tar" '["/agnhost"]'
  image "$e2e/agnhost" 2.55 '["pause"]' "$out/e2e-agnhost-prev.tar" '["/agnhost"]'
  # kitten:1.8 (the ImageVolume test's volume image): as upstream's test/images/kitten, agnhost
  # with html/kitten.jpg and html/data.json from the pinned source at /, Cmd test-webserver.
  # (Upstream's agnhost is Alpine, so its /etc/os-release names Alpine Linux; ours is not.)
  x="$work/kitten"
  mkdir -p "$x"
  cp "$e2e_src/test/images/kitten/html/kitten.jpg" "$e2e_src/test/images/kitten/html/data.json" "$x/"
  chmod 0644 "$x/kitten.jpg" "$x/data.json"
  extra_layer "$x"
  image "$e2e/kitten" 1.8 '["test-webserver"]' "$out/e2e-kitten.tar" '["/agnhost"]'
  extra_layers=()
  # nginx:1.15-4 and 1.27-0 (upstream: the official nginx image): Debian's nginx binary and
  # configuration from the packages in E2E_DEBS (nginx, nginx-common: `apt-get download`),
  # the shared libraries it loads from this host (the same Debian), the www-data user, logs
  # to the container's stdout/stderr as the official image does, Cmd nginx -g 'daemon off;'.
  if compgen -G "${E2E_DEBS:-/nonexistent}/nginx_*.deb" >/dev/null &&
    compgen -G "${E2E_DEBS:-/nonexistent}/nginx-common_*.deb" >/dev/null; then
    x="$work/nginx"
    mkdir -p "$x/etc" "$x/var/log/nginx" "$x/var/lib/nginx" "$x/var/www/html" "$x/run"
    for deb in "$E2E_DEBS"/nginx_*.deb "$E2E_DEBS"/nginx-common_*.deb; do
      dpkg-deb -x "$deb" "$work/nginx-debs"
    done
    mkdir -p "$x/usr/sbin"
    cp "$work/nginx-debs/usr/sbin/nginx" "$x/usr/sbin/nginx"
    cp -r "$work/nginx-debs/etc/nginx" "$x/etc/nginx"
    mkdir -p "$x/etc/nginx/sites-enabled" "$x/etc/nginx/modules-enabled"
    ln -s /etc/nginx/sites-available/default "$x/etc/nginx/sites-enabled/default"
    cp "$work/nginx-debs/usr/share/nginx/html/index.html" "$x/var/www/html/index.nginx-debian.html"
    ln -s /dev/stdout "$x/var/log/nginx/access.log"
    ln -s /dev/stderr "$x/var/log/nginx/error.log"
    cat "$root/etc/passwd" >"$x/etc/passwd"
    echo 'www-data:x:33:33:www-data:/var/www:/bin/false' >>"$x/etc/passwd"
    cat "$root/etc/group" >"$x/etc/group"
    echo 'www-data:x:33:' >>"$x/etc/group"
    ldd "$x/usr/sbin/nginx" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
      while read -r lib; do
        mkdir -p "$x$(dirname "$lib")"
        cp -L "$lib" "$x$lib"
      done
    extra_layer "$x"
    for tag in 1.15-4 1.27-0; do
      image "$e2e/nginx" "$tag" '["nginx","-g","daemon off;"]' "$out/e2e-nginx-$tag.tar"
    done
  fi
  exit 0
fi

if [ -n "$kube_proxy" ]; then
  # kube-proxy's iptables mode runs iptables, iptables-save and iptables-restore (and the ip6
  # ones); xtables-nft-multi answers to each name. Every shared library they (and the
  # extensions they dlopen) need comes along, at its path.
  [ -x "$kube_proxy" ] || { echo "build-images: $kube_proxy is not executable" >&2; exit 1; }
  multi=$(command -v xtables-nft-multi || echo /usr/sbin/xtables-nft-multi)
  [ -x "$multi" ] || { echo "build-images: xtables-nft-multi missing (apt install iptables)" >&2; exit 1; }
  # The extensions' directory as iptables was built to look for it (Debian: /usr/lib/<triplet>/
  # xtables; /lib is a symlink to usr/lib on the host, not in the image).
  xt=$(readlink -f "$(dirname "$(ldd "$multi" | awk '/libxtables/ {print $3}')")/xtables")
  x="$work/extra"
  mkdir -p "$x/usr/local/bin" "$x/usr/sbin" "$x/run" "$x/var/lib"
  cp "$kube_proxy" "$x/usr/local/bin/kube-proxy"
  cp "$multi" "$x/usr/sbin/xtables-nft-multi"
  for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    ln -s xtables-nft-multi "$x/usr/sbin/$n"
  done
  mkdir -p "$x$xt"
  cp "$xt"/*.so "$x$xt/"
  for f in "$multi" "$xt"/*.so; do
    ldd "$f" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'
  done | sort -u | while read -r lib; do
    mkdir -p "$x$(dirname "$lib")"
    cp -L "$lib" "$x$lib"
  done
  # Debian's /lib is a symlink to /usr/lib: the loader's and libraries' paths both resolve.
  extra_layer "$x"
  version=$("$kube_proxy" --version 2>/dev/null | awk '{print $2}')
  image localhost/kube-proxy "${version:-latest}" '["/usr/local/bin/kube-proxy"]' "$out/kube-proxy.tar"
  exit 0
fi

image localhost/busybox 1.36 '["sh"]' "$out/busybox.tar"
image localhost/pause 3.9 "$pause_cmd" "$out/pause.tar"
