#!/bin/bash
# The package under AppArmor, enforcing: a qemu guest (tests/hostmatrix/vm,
# Debian 12's stock kernel, AppArmor on) installs the .deb with dpkg (its
# postinst loads /etc/apparmor.d/throwbox in enforce mode), then runs
# `throwbox doctor`, the reconciliation example and python jobs forked from a
# template through /usr/bin/throwbox as root and as the service user, checks that the server and its jobs ran
# confined ("throwbox (enforce)") and that the kernel logged no denial.
# Usage: tests/package/apparmor_guest.sh BUILD_DIR     (host side; needs root)
#        tests/package/apparmor_guest.sh --guest DEB   (inside the guest)
# Exit 0 pass, 1 fail, 77 skip (no guest kernel can be booted, or AppArmor off).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [ "${1:-}" != "--guest" ]; then
  build=$(cd "$1" && pwd)
  [ "$(id -u)" -eq 0 ] || { echo "skip: needs root"; exit 77; }
  t0=$(date +%s)
  out=$(mktemp -d "$repo/build/apparmor-guest-XXXXXX")   # shared with the guest (-C "$repo")
  trap 'rm -rf "$out"' EXIT
  (cd "$build" && cpack -G DEB -B "$out" >"$out/cpack.log" 2>&1) || { cat "$out/cpack.log"; exit 1; }
  deb=$(ls "$out"/throwbox_*_amd64.deb | head -1)
  "$repo/tests/hostmatrix/vm/build.sh" || { echo "skip: no guest kernel (tests/hostmatrix/vm/build.sh)"; exit 77; }
  "$repo/tests/hostmatrix/vm/run.sh" --layout v2 -C "$repo" -t "${THROWBOX_APPARMOR_BUDGET_S:-1200}" -m 4G \
    "bash tests/package/apparmor_guest.sh --guest $deb"
  rc=$?
  echo "apparmor_guest: exit $rc in $(( $(date +%s) - t0 )) s"
  exit $rc
fi

# ---- inside the guest ----
deb=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
mountpoint -q /sys/kernel/security || mount -t securityfs securityfs /sys/kernel/security
if [ "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)" != "Y" ] || [ ! -d /sys/kernel/security/apparmor ]; then
  echo "skip: AppArmor is not enabled in this guest kernel"; exit 77
fi
echo "apparmor_guest: kernel $(uname -r), AppArmor on; installing $(basename "$deb")"
dmesg -C 2>/dev/null || true
DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" > /tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; fail "dpkg -i"; }
sed 's/^/  dpkg: /' /tmp/dpkg.log | tail -25
grep -q '^throwbox (enforce)$' /sys/kernel/security/apparmor/profiles ||
  { cat /sys/kernel/security/apparmor/profiles; fail "the postinst did not load the throwbox profile in enforce mode"; }
echo "apparmor_guest: profile loaded: throwbox (enforce)"

uid=$(id -u throwbox) gid=$(id -g throwbox)
status=0
for who in root throwbox; do
  state=$(mktemp -d /tmp/throwbox-aa-XXXXXX)
  wrap=/tmp/throwbox-as-$who
  if [ "$who" = root ]; then
    printf '#!/bin/sh\nexec /usr/bin/throwbox "$@"\n' > "$wrap"
  else
    chown "$uid:$gid" "$state"
    printf '#!/bin/sh\nexec setpriv --reuid=%s --regid=%s --clear-groups /usr/bin/throwbox "$@"\n' "$uid" "$gid" > "$wrap"
  fi
  chmod 0755 "$wrap"
  if "$wrap" doctor --state-dir "$state/doctor" > /tmp/doctor.log 2>&1; then
    echo "apparmor_guest: throwbox doctor as $who, confined: passed"
  else
    sed 's/^/  /' /tmp/doctor.log; echo "FAIL: throwbox doctor as $who under the profile" >&2; status=1
  fi
  # The server's confinement, read while it serves (its first job's pid 1 too).
  ( for _ in $(seq 1 600); do
      p=$(pgrep -x throwbox | head -1)
      if [ -n "$p" ]; then cat "/proc/$p/attr/current" > /tmp/label-$who 2>/dev/null && break; fi
      sleep 0.1
    done ) &
  watcher=$!
  if THROWBOX_BIN=$wrap THROWBOX_POLICY=/etc/throwbox/policy.json THROWBOX_STATE_DIR="$state/serve" \
     node "$repo/tests/run-example.mjs" "$repo/examples/reconcile" > /tmp/example.log 2>&1 &&
     grep -q '^completed (exit 0' /tmp/example.log; then
    echo "apparmor_guest: the reconciliation example as $who, confined: $(grep '^completed' /tmp/example.log)"
  else
    sed 's/^/  /' /tmp/example.log | tail -40; echo "FAIL: the reconciliation example as $who under the profile" >&2; status=1
  fi
  # The bundled policy forks python jobs from a template: one must be a fork
  # (the template loads its library and serves forks under the profile too).
  if THROWBOX_BIN=$wrap THROWBOX_POLICY=/etc/throwbox/policy.json THROWBOX_STATE_DIR="$state/forks" \
     node "$repo/tests/package/template_fork.mjs" > /tmp/fork.log 2>&1; then
    echo "apparmor_guest: as $who, confined: $(grep '^template_fork' /tmp/fork.log)"
  else
    sed 's/^/  /' /tmp/fork.log | tail -40; echo "FAIL: no python job forked from a template as $who under the profile" >&2; status=1
  fi
  wait "$watcher" 2>/dev/null
  label=$(cat /tmp/label-$who 2>/dev/null)
  echo "apparmor_guest: the server ran as: ${label:-?}"
  [ "$label" = "throwbox (enforce)" ] || { echo "FAIL: the server was not confined by throwbox (enforce)" >&2; status=1; }
  rm -rf "$state"
done
denied=$(dmesg 2>/dev/null | grep 'apparmor="DENIED"' | grep 'profile="throwbox' || true)
if [ -n "$denied" ]; then
  echo "apparmor_guest: denials logged:"; echo "$denied" | sed 's/^.*apparmor=/  apparmor=/' | sort | uniq -c | head -40
  echo "FAIL: the profile denied something throwbox did" >&2; status=1
else
  echo "apparmor_guest: no denial logged"
fi
exit $status
