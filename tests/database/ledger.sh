#!/usr/bin/env bash
# database.ledger: the ledger's contract suite (tests/unit/ledger_backend_test.cpp,
# the cases named "ledger backends: ...") against SQLite and a real
# PostgreSQL cluster this script starts (postgres.sh) and removes.
# Usage: ledger.sh UNIT_TESTS_EXE
set -euo pipefail
exe=$1
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/throwbox-pg-XXXXXX)
cleanup() { "$here/postgres.sh" stop "$dir" || true; rm -rf "$dir"; }
trap cleanup EXIT
set +e
vars=$("$here/postgres.sh" start "$dir")
rc=$?
set -e
[ $rc -eq 0 ] || exit $rc
echo "$vars"
env $vars "$exe" -tc="ledger backends:*" --duration=true
