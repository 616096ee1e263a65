#!/usr/bin/env bash
# A newcomer's first minutes, timed: clones this repository (its committed
# HEAD) into a fresh directory and times scripts/run there, to the
# reconciliation result, then scripts/test in the same clone, with ccache
# off (a machine's first build) or on (a machine that has built throwbox
# before). The Debian packages must be installed already (run scripts/test
# once): what is timed is the build and the run, not the downloads.
# Prints one line per step: wall seconds, CPU seconds of the step's processes,
# and the machine's load before it; nothing is kept.
# Usage: bench/first_run.sh [--cache off|on|both] [--steps run|run,test]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=both steps=run,test
while [ $# -gt 0 ]; do
  case $1 in
    --cache) cache=${2:?--cache off, on or both}; shift ;;
    --steps) steps=${2:?--steps run or run,test}; shift ;;
    *) echo "bench/first_run.sh: unknown argument '$1' (--cache off|on|both, --steps run|run,test)" >&2; exit 2 ;;
  esac
  shift
done
case $cache in off) modes=(off) ;; on) modes=(on) ;; both) modes=(off on) ;;
  *) echo "bench/first_run.sh: --cache is off, on or both, not '$cache'" >&2; exit 2 ;; esac
if [ "${modes[*]}" != off ] && ! command -v ccache >/dev/null; then
  echo "bench/first_run.sh: --cache on needs ccache (apt-get install ccache)" >&2
  exit 2
fi

work=$(mktemp -d /tmp/throwbox-first-run.XXXXXX)
trap 'rm -rf "$work"' EXIT
# timed LABEL CMD...: runs CMD, prints LABEL's wall and CPU seconds.
timed() {
  local label=$1 load t0 t1 cpu log=$work/step.log
  shift
  load=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s.%N)
  if ! ( "$@" ) >"$log" 2>&1; then
    echo "bench/first_run.sh: $label failed; its last lines:" >&2
    tail -20 "$log" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  # this shell's children: the step's processes, the compilers included
  times >"$work/times"  # not in $(...): a subshell's times would be its own
  cpu=$(sed -n 2p "$work/times" | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); n += a[1] * 60 + a[2] } printf "%.0f", n }')
  awk -v l="$label" -v a="$t0" -v b="$t1" -v c="$cpu" -v load="$load" \
    'BEGIN { printf "%-34s wall %6.1f s   cpu %6s s (cumulative)   load before %s\n", l, b - a, c, load }'
}

echo "first_run: $(nproc) cores, HEAD $(git -C "$repo" rev-parse --short HEAD), ccache: ${modes[*]}"
for mode in "${modes[@]}"; do
  clone=$work/clone-$mode
  git clone -q "$repo" "$clone"
  if [ "$mode" = off ]; then export CCACHE_DISABLE=1; else unset CCACHE_DISABLE; fi
  timed "scripts/run (ccache $mode)" "$clone/scripts/run"
  # scripts/run exits 0 only when the job completed (tests/run-example.mjs)
  grep -A1 '^== status' "$work/step.log" | tail -1 | sed 's/^/  /'
  if [[ $steps == *test* ]]; then
    timed "scripts/test after it (ccache $mode)" "$clone/scripts/test"
    grep -E '^[0-9]+% tests passed' "$work/step.log" | sed 's/^/  /'
  fi
  rm -rf "$clone"
done
