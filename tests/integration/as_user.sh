#!/usr/bin/env bash
# Runs one integration test with the server as an unprivileged user (desktop
# use). The build tree may sit under a root-only directory, so the binary, the
# policy, the example and the test client are staged in a world-readable temp
# dir first. Skips (77) when not root or when the test user does not exist.
set -euo pipefail
test_file=$1   # relative to tests/, e.g. integration/reconcile.test.mjs
user=${THROWBOX_TEST_USER:-throwbox-test}
if [ "$(id -u)" -ne 0 ]; then echo "skip: needs root to switch to $user"; exit 77; fi
if ! id "$user" >/dev/null 2>&1; then echo "skip: user $user does not exist (scripts/test creates it)"; exit 77; fi

src=$(cd "$(dirname "$0")/../.." && pwd)
stage=$(mktemp -d /tmp/throwbox-as-user.XXXXXX)
bound=
cleanup() {
  if [ -n "$bound" ]; then umount "$bound" || umount -l "$bound"; fi
  rm -rf "$stage"
}
trap cleanup EXIT
chmod 755 "$stage"
mkdir -p "$stage/build" "$stage/tests" "$stage/tmp"
chmod 1777 "$stage/tmp"
cp "$THROWBOX_BIN" "$(dirname "$THROWBOX_BIN")/throwbox-runner" "$(dirname "$THROWBOX_BIN")/throwbox-parser" "$stage/build/"
# A template's shared object (pool.templates), beside the runner as installed.
if [ -f "$(dirname "$THROWBOX_BIN")/libthrowbox-template.so" ]; then
  cp "$(dirname "$THROWBOX_BIN")/libthrowbox-template.so" "$stage/build/"
fi
cp -r "$src/policies" "$src/examples" "$stage/"
# THROWBOX_TEST_POLICY: a policy file of the caller's instead of the bundled one.
policy=$stage/policies/default.json
if [ -n "${THROWBOX_TEST_POLICY:-}" ]; then
  cp "$THROWBOX_TEST_POLICY" "$stage/policies/under-test.json"
  policy=$stage/policies/under-test.json
fi
# Hard links where the stage shares a filesystem with the tree: node_modules is
# 236 MB (a Node 22 binary for the conformance CLI), and copying it while
# adversarial.disk_fill watches the host's free space looked like a leak.
# Elsewhere (the host matrix's guests see the tree over 9p) node_modules is
# bound read-only instead of copied: a bind mount does not need the user to
# traverse the tree's parents, and it is unmounted on exit.
# One link first: where hard links cannot work (another filesystem), cp -al
# would try, and fail, once per file of node_modules.
links=1
ln "$src/tests/package.json" "$stage/.link-probe" 2>/dev/null || links=0
rm -f "$stage/.link-probe"
for d in integration adversarial; do
  if [ $links = 1 ]; then cp -al "$src/tests/$d" "$stage/tests/"; else cp -r "$src/tests/$d" "$stage/tests/"; fi
done
if [ $links = 1 ]; then
  cp -al "$src/tests/node_modules" "$stage/tests/"
else
  rm -rf "$stage/tests/node_modules"
  mkdir "$stage/tests/node_modules"
  mount --bind "$src/tests/node_modules" "$stage/tests/node_modules"
  bound="$stage/tests/node_modules"
  mount -o remount,bind,ro "$bound"
fi
cp "$src/tests/package.json" "$stage/tests/"
# The gate's corpus (tests/gate_corpus), read by adversarial/artifact_corpus.
if [ -d "$src/tests/gate_corpus" ]; then cp -r "$src/tests/gate_corpus" "$stage/tests/"; fi
if [ -n "$bound" ]; then
  find "$stage" -path "$bound" -prune -o -exec chmod a+rX {} +
else
  chmod -R a+rX "$stage"
fi

# Host matrix modes (tests/hostmatrix/): THROWBOX_TEST_CGROUP puts the test
# (and so the server it starts) in that cgroup first, e.g. a delegated leaf
# that a terminal shares or a normal user's login scope; with
# THROWBOX_TEST_SERVER_SCOPE the server alone starts in a fresh cgroup made
# under that directory, as `systemd-run --user --scope -p Delegate=yes` gives.
if [ -n "${THROWBOX_TEST_CGROUP:-}" ]; then
  echo $$ >"$THROWBOX_TEST_CGROUP/cgroup.procs"
fi
if [ -n "${THROWBOX_TEST_SERVER_SCOPE:-}" ]; then
  mv "$stage/build/throwbox" "$stage/build/throwbox.real"
  cat >"$stage/build/throwbox" <<WRAPPER
#!/bin/bash
scope="$THROWBOX_TEST_SERVER_SCOPE/run-\$\$.scope"
mkdir "\$scope" && echo \$\$ >"\$scope/cgroup.procs" || exit 125
exec -a "\$0" "\$0.real" "\$@"
WRAPPER
  chmod 755 "$stage/build/throwbox"
fi
pass=()
for v in THROWBOX_EXPECT_CGROUPS THROWBOX_TEST_SLOWDOWN THROWBOX_TEST_REPEAT THROWBOX_TEST_WATCHDOG_S THROWBOX_EXPECT_UID_MODE \
  THROWBOX_EXPECT_WARM THROWBOX_EXPECT_TEMPLATE; do
  if [ -n "${!v:-}" ]; then pass+=("$v=${!v}"); fi
done

cd "$stage/tests"
# No capability is inherited; the bounding set stays a normal login's (full),
# so the set-uid newuidmap/newgidmap work as they do for a desktop user.
setpriv --reuid="$user" --regid="$user" --clear-groups --inh-caps=-all \
  env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$stage/tmp" TMPDIR="$stage/tmp" \
  THROWBOX_BIN="$stage/build/throwbox" THROWBOX_POLICY="$policy" \
  THROWBOX_TEST_AS_USER=1 "${pass[@]}" node "$test_file"
