#!/usr/bin/env bash
# build.sh: prepares everything run.sh boots, in one cache directory.
#   - qemu-system-x86 on this machine (installed with apt-get when run as root)
#   - Debian 12's stock kernel and busybox-static, fetched with `apt-get
#     download` and unpacked with dpkg-deb -x (nothing else is installed)
#   - initramfs.cpio.gz: busybox, init.sh and the virtio/9p/overlay modules
#   - accel: "kvm" or "tcg", found by actually booting the kernel
#
# Usage: build.sh [--force]
#   cache: ${THROWBOX_VM_CACHE:-/var/tmp/throwbox-vm}
#   --force  unpack, rebuild and re-probe even when the cache looks complete
# Quick no-op when the cache stamp matches the current kernel package version.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${THROWBOX_VM_CACHE:-/var/tmp/throwbox-vm}
force=0
case ${1:-} in
  --force) force=1 ;;
  '') ;;
  -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "build.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac

log() { echo "build.sh: $*" >&2; }
die() { log "$*"; exit 1; }
is_root() { [ "$(id -u)" -eq 0 ]; }
# CI installs packages in legs that run side by side (the package root's
# mmdebstrap, this qemu): apt-get of each waits for the other's, through one
# lock for throwbox's scripts and dpkg's own.
apt_locked() { flock -w 900 /run/lock/throwbox-apt.lock apt-get -o DPkg::Lock::Timeout=600 "$@"; }
apt_updated=0
apt_update() { # at most once per run: it is slow and needs the network
  [ "$apt_updated" = 1 ] && return 0
  is_root || die "apt lists are stale or missing; run 'apt-get update' as root"
  log "apt-get update"
  apt_locked update -q >&2; apt_updated=1
}

# --- 1. qemu ------------------------------------------------------------------
if ! command -v qemu-system-x86_64 >/dev/null; then
  is_root || die "qemu-system-x86_64 missing: apt-get install --no-install-recommends qemu-system-x86"
  log "installing qemu-system-x86"
  inst() { DEBIAN_FRONTEND=noninteractive apt_locked install -y -q --no-install-recommends qemu-system-x86 >&2; }
  # try the existing lists first: an update is only needed when they are stale
  inst || { apt_update; inst; }
fi

# --- 2. which kernel ------------------------------------------------------------
# The metapackage's dependency names the current ABI (linux-image-6.1.0-NN-amd64);
# its version is what the cache stamp is keyed on.
resolve_pkgs() {
  kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
         sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -1)
  [ -n "$kpkg" ] || return 1
  kpkgver=$(apt-cache show --no-all-versions "$kpkg" 2>/dev/null | sed -n 's/^Version: //p' | head -1)
  bbver=$(apt-cache show --no-all-versions busybox-static 2>/dev/null | sed -n 's/^Version: //p' | head -1)
  [ -n "$kpkgver" ] && [ -n "$bbver" ]
}
resolve_pkgs || { apt_update; resolve_pkgs; } || die "apt-cache cannot resolve linux-image-amd64 / busybox-static"

# veth: integration.network_egress's fake internet (a pair between two network namespaces)
mods=(virtio_pci 9pnet_virtio 9p overlay virtio_console veth)
# the stamp also covers the guest's stage-1 init and the module list, so
# editing either rebuilds the initramfs
key="$kpkg=$kpkgver busybox-static=$bbver init=$(sha256sum <"$here/init.sh" | cut -c1-16) mods=${mods[*]}"
stamp=$cache/stamp
if [ "$force" = 0 ] && [ -s "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] &&
   [ -s "$cache/initramfs.cpio.gz" ] && [ -e "$cache/vmlinuz" ] && [ -s "$cache/accel" ]; then
  log "cache complete ($kpkg $kpkgver, accel $(cat "$cache/accel")): nothing to do"
  exit 0
fi
mkdir -p "$cache/debs"

# --- 3. download and unpack ----------------------------------------------------
fetch() { # pkg version -> path of the .deb in the cache
  local pkg=$1 ver=$2 f
  f=$(ls "$cache/debs/${pkg}_${ver//:/%3a}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$f" ]; then
    log "apt-get download $pkg=$ver"
    # old versions of the same package are useless once superseded
    rm -f "$cache/debs/${pkg}_"*.deb
    (cd "$cache/debs" && apt_locked download -q "$pkg=$ver" >&2) ||
      { apt_update; (cd "$cache/debs" && apt_locked download -q "$pkg=$ver" >&2); }
    f=$(ls "$cache/debs/${pkg}_"*.deb | head -1)
  fi
  echo "$f"
}
kdeb=$(fetch "$kpkg" "$kpkgver")
bbdeb=$(fetch busybox-static "$bbver")

log "unpacking $(basename "$kdeb") and $(basename "$bbdeb")"
rm -rf "$cache/kernel" "$cache/busybox" "$cache/kernel.tmp" "$cache/busybox.tmp"
dpkg-deb -x "$kdeb" "$cache/kernel.tmp" && mv "$cache/kernel.tmp" "$cache/kernel"
dpkg-deb -x "$bbdeb" "$cache/busybox.tmp" && mv "$cache/busybox.tmp" "$cache/busybox"
bb=$cache/busybox/bin/busybox
[ -x "$bb" ] || die "no busybox in $bbdeb"
kver=$(basename "$(ls -d "$cache/kernel/lib/modules/"*/ | head -1)")
moddir=$cache/kernel/lib/modules/$kver
# this machine may have no kmod; busybox's depmod writes a modules.dep we can read
log "depmod $kver (busybox)"
"$bb" depmod -b "$cache/kernel" "$kver"

# --- 4. initramfs ----------------------------------------------------------------
# modules.dep lines are "path: dep1 dep2"; emit dependencies before the module
resolve_mod() {
  local name=$1 line d
  line=$(grep -E "(^|/)${name//_/[_-]}\.ko(\.[a-z]+)?:" "$moddir/modules.dep" | head -1 || true)
  if [ -z "$line" ]; then
    grep -qE "/${name//_/[_-]}\.ko" "$moddir/modules.builtin" 2>/dev/null && return 0   # built in
    die "kernel $kver has no module $name"
  fi
  for d in ${line#*:}; do resolve_mod "$(basename "${d%%.ko*}")"; done
  echo "${line%%:*}"
}
log "building initramfs"
ird=$cache/initramfs.d
rm -rf "$ird"; mkdir -p "$ird"/{bin,proc,sys,dev,lower,rw,newroot,modules}
cp "$bb" "$ird/bin/busybox"
for t in sh mount insmod switch_root cat mkdir ls grep sleep poweroff; do ln -s busybox "$ird/bin/$t"; done
: >"$ird/modules/load"
for m in "${mods[@]}"; do resolve_mod "$m"; done | awk '!seen[$0]++' | while read -r p; do
  f=$(basename "$p")
  # busybox insmod wants plain .ko: decompress here if the kernel ships them packed
  case $f in
    *.ko.xz) xz -dc "$moddir/$p" >"$ird/modules/${f%.xz}"; f=${f%.xz} ;;
    *.ko.zst) zstd -qdc "$moddir/$p" >"$ird/modules/${f%.zst}"; f=${f%.zst} ;;
    *.ko.gz) gzip -dc "$moddir/$p" >"$ird/modules/${f%.gz}"; f=${f%.gz} ;;
    *) cp "$moddir/$p" "$ird/modules/$f" ;;
  esac
  echo "$f" >>"$ird/modules/load"
done
install -m 755 "$here/init.sh" "$ird/init"
# busybox's cpio can write newc archives, so the host needs no cpio package
cpio=(cpio); command -v cpio >/dev/null || cpio=("$bb" cpio)
(cd "$ird" && find . | LC_ALL=C sort | "${cpio[@]}" -o -H newc 2>/dev/null | gzip -1) >"$cache/initramfs.cpio.gz.tmp"
mv "$cache/initramfs.cpio.gz.tmp" "$cache/initramfs.cpio.gz"
ln -sfn "kernel/boot/vmlinuz-$kver" "$cache/vmlinuz"
echo "$kver" >"$cache/kernel-version"
log "initramfs: $(tr '\n' ' ' <"$ird/modules/load")"

# --- 5. accelerator ----------------------------------------------------------------
# Opening /dev/kvm proves nothing: a host whose KVM is kvm_pvm (PVM) only runs
# PVM-enabled guest kernels, and a stock kernel hangs early in boot. So boot
# for real with busybox poweroff as init; KVM counts only if qemu exits in time.
probe_err=
probe() { # accel cpu seconds -> echoes the wall seconds; fails (probe_err says why) otherwise
  local t0 rc=0 errf
  errf=$(mktemp); t0=$(date +%s.%N)
  # in a subshell whose stderr is dropped: bash would report an aborted qemu
  ( timeout -k 3 "$3" qemu-system-x86_64 -machine "q35,accel=$1" -cpu "$2" -smp 1 -m 256M \
    -nodefaults -no-user-config -display none -no-reboot -serial none -nic none \
    -kernel "$cache/vmlinuz" -initrd "$cache/initramfs.cpio.gz" \
    -append "panic=-1 quiet rdinit=/bin/poweroff -- -f" </dev/null >/dev/null 2>"$errf" ) 2>/dev/null || rc=$?
  case $rc in
    0) ;;
    124|137) probe_err="the guest did not power off within $3 s" ;;
    *) probe_err="qemu exit $rc: $(grep -m1 . "$errf" || true)" ;;
  esac
  rm -f "$errf"
  [ "$rc" = 0 ] || return 1
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}
accel=
if [ -r /dev/kvm ] && [ -w /dev/kvm ]; then
  log "probing KVM (boot + power-off, 30 s limit)"
  # (not in $(...): probe_err must survive)
  if probe kvm host 30 >"$cache/probe.out"; then accel=kvm; log "KVM boots this kernel: $(cat "$cache/probe.out")s"
  else
    why=$probe_err
    [ -d /sys/module/kvm_pvm ] && why="$why (host KVM is kvm_pvm: only PVM guest kernels run)"
    log "KVM unusable: $why"
  fi
else
  log "no usable /dev/kvm"
fi
if [ -z "$accel" ]; then
  log "probing TCG (boot + power-off, 300 s limit)"
  probe tcg max 300 >"$cache/probe.out" || die "the kernel does not boot under TCG either: $probe_err"
  accel=tcg; log "TCG: $(cat "$cache/probe.out")s (emulated: commands run several times slower)"
fi
rm -f "$cache/probe.out"
echo "$accel" >"$cache/accel"
echo "$key" >"$stamp"
log "ready: $cache ($kver, accel $accel)"
