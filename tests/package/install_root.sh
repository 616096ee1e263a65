#!/bin/bash
# The Debian package installed in a clean Debian 12 root: mmdebstrap builds a
# minimal bookworm (apt variant, plus python3 for the example) and installs
# the .deb there with apt-get, which resolves its Depends from the archive,
# so a missing or wrong Depends fails here. Then, through the installed
# /usr/bin/throwbox in that root (entered with bwrap's pivot_root, so user
# namespaces work in it as on a host): `throwbox doctor`, and the
# reconciliation example through the MCP client, as root and as the
# package's service user `throwbox`.
# Usage: tests/package/install_root.sh BUILD_DIR [DEB]
# Needs root, mmdebstrap, bwrap, node and the Debian archive. Exit 0/1, 77 skip.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "$1" && pwd)
deb=${2:-}
t0=$(date +%s)
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root"; exit 77; }
# CI runs this beside the host matrix, which installs qemu: apt-get of the
# two waits for the other's (one lock for throwbox's scripts, and dpkg's own).
apt_locked() { flock -w 900 /run/lock/throwbox-apt.lock apt-get -o DPkg::Lock::Timeout=600 "$@"; }
if ! command -v mmdebstrap >/dev/null || ! command -v bwrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt_locked install -y -q --no-install-recommends mmdebstrap bubblewrap >/dev/null 2>&1 ||
    { apt_locked update -q >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt_locked install -y -q --no-install-recommends mmdebstrap bubblewrap >/dev/null; } ||
    fail "cannot install mmdebstrap and bubblewrap"
fi

work=$(mktemp -d /tmp/throwbox-installroot-XXXXXX)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
if [ -z "$deb" ]; then
  (cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
  deb=$(ls "$work"/out/throwbox_*_amd64.deb | head -1)
fi
deb=$(readlink -f "$deb")
echo "install_root: $(basename "$deb") into a clean bookworm root"

root="$work/root"
mmdebstrap --variant=apt --include=python3 \
  --customize-hook="copy-in $deb /tmp" \
  --customize-hook='chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q /tmp/'"$(basename "$deb")" \
  --customize-hook='rm -f "$1"/tmp/*.deb' \
  bookworm "$root" >"$work/mmdebstrap.log" 2>&1 || { tail -60 "$work/mmdebstrap.log"; fail "mmdebstrap / apt-get install"; }
echo "install_root: root made and the package installed in $(( $(date +%s) - t0 )) s"
sed -n '/throwbox: what this host gives/,/throwbox: serve over stdio/p' "$work/mmdebstrap.log" | sed 's/^/  postinst: /' | head -30
for f in /usr/bin/throwbox /usr/libexec/throwbox/throwbox-runner /usr/libexec/throwbox/throwbox-parser /etc/throwbox/policy.json; do
  [ -e "$root$f" ] || fail "$f is not installed"
done
grep -q '^throwbox:' "$root/etc/passwd" || fail "postinst created no throwbox user"
uid=$(awk -F: '$1 == "throwbox" {print $3}' "$root/etc/passwd")
gid=$(awk -F: '$1 == "throwbox" {print $4}' "$root/etc/passwd")

# Enter the root: its own / by pivot_root, the host's /proc, /sys and /dev,
# and /tmp shared (the test client's state directories live there).
for who in root throwbox; do
  wrap="$work/throwbox-as-$who"
  if [ "$who" = root ]; then as=""; else as="/usr/bin/setpriv --reuid=$uid --regid=$gid --clear-groups --inh-caps=-all"; fi
  cat > "$wrap" <<WRAP
#!/bin/sh
exec /usr/bin/bwrap --bind "$root" / --bind /proc /proc --dev-bind /dev /dev --bind /sys /sys \\
  --bind /tmp /tmp --die-with-parent -- $as /usr/bin/throwbox "\$@"
WRAP
  chmod 0755 "$wrap"
done
"$work/throwbox-as-root" --version | grep -q '^throwbox ' || fail "the installed throwbox does not run"

status=0
for who in root throwbox; do
  state=$(mktemp -d /tmp/throwbox-installroot-state-XXXXXX)
  [ "$who" = throwbox ] && chown "$uid:$gid" "$state"
  if "$work/throwbox-as-$who" doctor --state-dir "$state/doctor" >"$work/doctor-$who.log" 2>&1; then
    echo "install_root: throwbox doctor as $who: passed (the installed runner, /etc/throwbox/policy.json)"
  else
    sed 's/^/  /' "$work/doctor-$who.log"; echo "FAIL: throwbox doctor as $who" >&2; status=1
  fi
  if THROWBOX_BIN="$work/throwbox-as-$who" THROWBOX_POLICY=/etc/throwbox/policy.json \
     THROWBOX_STATE_DIR="$state/serve" node "$repo/tests/run-example.mjs" "$repo/examples/reconcile" \
     >"$work/example-$who.log" 2>&1; then
    grep -q '^completed (exit 0' "$work/example-$who.log" || { cat "$work/example-$who.log"; fail "no completed job as $who"; }
    echo "install_root: the reconciliation example as $who: $(grep '^completed' "$work/example-$who.log")"
  else
    sed 's/^/  /' "$work/example-$who.log" | tail -40; echo "FAIL: the reconciliation example as $who" >&2; status=1
  fi
  rm -rf "$state"
done
echo "install_root: $(( $(date +%s) - t0 )) s"
exit $status
