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
trap 'rm -rf "$stage"' EXIT
chmod 755 "$stage"
mkdir -p "$stage/build" "$stage/tests" "$stage/tmp"
chmod 1777 "$stage/tmp"
cp "$THROWBOX_BIN" "$(dirname "$THROWBOX_BIN")/throwbox-runner" "$stage/build/"
cp -r "$src/policies" "$src/examples" "$stage/"
# Hard links where the stage shares a filesystem with the tree: node_modules is
# 236 MB (a Node 22 binary for the conformance CLI), and copying it while
# adversarial.disk_fill watches the host's free space looked like a leak.
for d in integration adversarial node_modules; do
  cp -al "$src/tests/$d" "$stage/tests/" 2>/dev/null || cp -r "$src/tests/$d" "$stage/tests/"
done
cp "$src/tests/package.json" "$stage/tests/"
chmod -R a+rX "$stage"

cd "$stage/tests"
setpriv --reuid="$user" --regid="$user" --clear-groups --inh-caps=-all --bounding-set=-all \
  env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$stage/tmp" TMPDIR="$stage/tmp" \
  THROWBOX_BIN="$stage/build/throwbox" THROWBOX_POLICY="$stage/policies/default.json" \
  THROWBOX_TEST_AS_USER=1 node "$test_file"
