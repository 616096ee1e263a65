#!/bin/bash
# unit.package: builds the Debian package from this build directory (cpack)
# and checks it without installing it on this host: its files, conffiles and
# Depends; lintian (no error); the AppArmor profile parsed by apparmor_parser;
# the systemd unit verified and scored by systemd-analyze (the exposure score
# is printed); and the extracted tree run in place (the server finds its
# runner and policy from its own location: `policy check`, `doctor`).
# Usage: tests/package/check.sh BUILD_DIR      Exit: 0 pass, 1 fail, 77 skip.
set -uo pipefail
build=$(cd "$1" && pwd)
fail() { echo "FAIL: $*" >&2; exit 1; }
for tool in cpack dpkg-deb lintian apparmor_parser systemd-analyze help2man; do
  command -v "$tool" >/dev/null || { echo "skip: $tool is not installed (scripts/setup.sh installs it)"; exit 77; }
done
grep -q '^CMAKE_INSTALL_PREFIX:PATH=/usr$' "$build/CMakeCache.txt" ||
  { echo "skip: $build is not configured with CMAKE_INSTALL_PREFIX=/usr (the package's)"; exit 77; }

work=$(mktemp -d /tmp/throwbox-package-XXXXXX)
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
(cd "$build" && cpack -G DEB -B "$work/out" >"$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; fail "cpack"; }
deb=$(ls "$work"/out/throwbox_*_amd64.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { cat "$work/cpack.log"; fail "cpack made no throwbox_*_amd64.deb"; }
echo "package: $(basename "$deb"), $(stat -c %s "$deb") bytes, built in $(( $(date +%s) - t0 )) s"
dpkg-deb -I "$deb" | sed -n "/^ Package:/,/^ Description:/p"

# Files where the README says they are.
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' > "$work/files"
for f in /usr/bin/throwbox /usr/libexec/throwbox/throwbox-runner /usr/libexec/throwbox/throwbox-parser \
         /usr/share/throwbox/policies/default.json \
         /usr/share/throwbox/policies/strict.json /usr/share/throwbox/policies/data.json /etc/throwbox/policy.json \
         /lib/systemd/system/throwbox.service /etc/apparmor.d/throwbox /usr/share/man/man1/throwbox.1.gz \
         /usr/share/doc/throwbox/copyright /usr/share/doc/throwbox/changelog.gz /usr/share/doc/throwbox/README.md.gz \
         /usr/share/doc/throwbox/examples/reconcile/reconcile.py /usr/share/lintian/overrides/throwbox; do
  grep -qx "$f" "$work/files" || fail "the package lacks $f"
done
dpkg-deb -e "$deb" "$work/control"
for f in /etc/throwbox/policy.json /etc/apparmor.d/throwbox; do
  grep -qx "$f" "$work/control/conffiles" || fail "$f is not a conffile"
done
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for lib in libc6 libssl3 libqpdf29 libcjose0 libsqlite3-0 libpq5 libmagic1 libcmark0 adduser; do
  [[ $depends == *"$lib"* ]] || fail "Depends lacks $lib (dpkg-shlibdeps)"
done
for s in postinst prerm postrm; do [ -x "$work/control/$s" ] || fail "no executable $s"; done

# lintian: any error fails; warnings and info are printed.
# TMPDIR: lintian leaves its ELF index (mldbm-elf-*) in the temporary
# directory; in $work it goes with the rest.
TMPDIR="$work" lintian --display-info --fail-on error "$deb" >"$work/lintian.log" 2>&1
lrc=$?
echo "lintian (exit $lrc):"; sed 's/^/  /' "$work/lintian.log"
[ $lrc -eq 0 ] || fail "lintian reports errors"
grep -q '^E:' "$work/lintian.log" && fail "lintian reports errors"

# The tree as installed, in place.
root="$work/root"
dpkg-deb -x "$deb" "$root"
apparmor_parser -Q -K -I /etc/apparmor.d "$root/etc/apparmor.d/throwbox" || fail "apparmor_parser refuses the profile"
grep -q "^profile throwbox /usr/bin/throwbox " "$root/etc/apparmor.d/throwbox" || fail "the profile is not attached to /usr/bin/throwbox"
echo "apparmor_parser: the profile parses"
unit="$root/lib/systemd/system/throwbox.service"
grep -q '^ExecStart=/usr/bin/throwbox serve --http ' "$unit" || fail "ExecStart is not /usr/bin/throwbox serve --http"
# systemctl reload: SIGHUP, which reloads and never stops the server.
grep -qx 'ExecReload=/bin/kill -HUP $MAINPID' "$unit" || fail "ExecReload is not kill -HUP \$MAINPID"
# verify insists that ExecStart exists: a copy pointing at the extracted binary.
sed "s|^ExecStart=/usr/bin/throwbox |ExecStart=$root/usr/bin/throwbox |" "$unit" > "$work/throwbox.service"
out=$(systemd-analyze verify --man=no "$work/throwbox.service" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
echo "systemd-analyze verify: no warning"
systemd-analyze security --offline=true "$work/throwbox.service" >"$work/security.log" 2>&1 || true
score=$(grep -o 'Overall exposure level for throwbox.service: [0-9.]* [A-Z]*' "$work/security.log")
[ -n "$score" ] || { cat "$work/security.log"; fail "systemd-analyze security gave no score"; }
echo "systemd-analyze security: $score"
grep -E '^✗' "$work/security.log" | sed 's/^/  /' | head -40

# The extracted binary finds its runner and policies beside it (no /etc here).
policy_src=$("$root/usr/bin/throwbox" policy check 2>&1 >/dev/null | head -1)
"$root/usr/bin/throwbox" policy check >/dev/null 2>"$work/policy.err" || { cat "$work/policy.err"; fail "policy check"; }
if [ ! -e /etc/throwbox/policy.json ]; then
  "$root/usr/bin/throwbox" serve --help >/dev/null || fail "serve --help"
fi
man -l "$root/usr/share/man/man1/throwbox.1.gz" 2>/dev/null | grep -q -- '--state-dir' || fail "the man page lacks serve's options"
state=$(mktemp -d /tmp/throwbox-package-state-XXXXXX)
if "$root/usr/bin/throwbox" doctor --state-dir "$state" >"$work/doctor.log" 2>&1; then
  echo "doctor (extracted tree, its own runner): passed"
  grep -q "$root/usr/libexec/throwbox/throwbox-runner\|probe job" "$work/doctor.log" || true
else
  cat "$work/doctor.log"; rm -rf "$state"; fail "throwbox doctor from the extracted package"
fi
rm -rf "$state"
echo "package checks passed${policy_src:+ ($policy_src)}"
