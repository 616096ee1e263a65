#!/usr/bin/env bash
# Runs one libFuzzer harness for a bounded time: the seed corpus
# (tests/fuzz/corpus/<target>) first, then new inputs, kept in a working
# corpus of its own so the seeds in the tree stay as committed.
# Usage: run.sh [--fresh] [--skip-missing] <fuzz build dir> <target> <seconds> <working corpus dir>
# --fresh: start from the seeds alone (ctest), not what earlier runs found.
# --skip-missing: a harness not built is skipped (configured without clang).
# Exit: 0 nothing found; 77 skipped (--skip-missing and not built);
# anything else a finding, whose input is saved under <working corpus dir>.
set -euo pipefail
fresh=0 skip_missing=0
if [ "${1:-}" = --fresh ]; then fresh=1; shift; fi
if [ "${1:-}" = --skip-missing ]; then skip_missing=1; shift; fi
build_dir=$1 target=$2 seconds=$3 work=$4
here=$(cd "$(dirname "$0")" && pwd)
bin="$build_dir/${target}_fuzz"
if [ ! -x "$bin" ]; then
  if [ "$skip_missing" -eq 1 ]; then
    echo "fuzz.$target: skipped: no clang++ that links -fsanitize=fuzzer (apt-get install clang libclang-rt-14-dev, then re-run cmake)" >&2
    exit 77
  fi
  echo "fuzz.$target: $bin is not built" >&2
  exit 1
fi
[ "$fresh" -eq 1 ] && rm -rf "$work/corpus"
mkdir -p "$work/corpus" "$work/findings"
# -timeout: one input running 10 s is a finding (a hang); -rss_limit_mb: so is 2 GB.
# -error_exitcode: libFuzzer's own reports (a FUZZ_CHECK abort, a deadly
# signal, running out of memory) exit 77 by default, which ctest reads as skipped.
exec "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -error_exitcode=1 -print_final_stats=1 \
  -artifact_prefix="$work/findings/" "$work/corpus" "$here/corpus/$target"
