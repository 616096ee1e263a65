#!/usr/bin/env bash
# A newcomer's first minutes, timed: clones this repository (its committed
# HEAD) into a fresh directory and times scripts/run there, to the
# reconciliation result, then scripts/test in the same clone, with ccache
# off (a machine's first build) or on (a machine that has built throwbox
# before). The Debian packages must be installed already (run scripts/test
# once): what is timed is the build and the run, not the downloads.
# Prints one line per step: wall seconds, CPU seconds of the step's processes,
# and the machine's load before it; nothing is kept.
# --fresh-machine times scripts/run on a machine with nothing installed: a
# Debian 12 root made with mmdebstrap (the "important" packages and git,
# as a fresh install has them; not timed), the clone in it, entered with
# bwrap (the host's /proc, /sys and /dev, its network); scripts/run there
# installs every package it needs from the Debian archive, the test client
# from npm, and builds with an empty ccache. Needs root and the network.
# Usage: bench/first_run.sh [--cache off|on|both] [--steps run|run,test]
#        bench/first_run.sh --fresh-machine
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=both steps=run,test fresh=0
while [ $# -gt 0 ]; do
  case $1 in
    --fresh-machine) fresh=1 ;;
    --cache) cache=${2:?--cache off, on or both}; shift ;;
    --steps) steps=${2:?--steps run or run,test}; shift ;;
    *) echo "bench/first_run.sh: unknown argument '$1' (--cache off|on|both, --steps run|run,test, --fresh-machine)" >&2; exit 2 ;;
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

if [ $fresh -eq 1 ]; then
  [ "$(id -u)" -eq 0 ] || { echo "bench/first_run.sh: --fresh-machine needs root (mmdebstrap, bwrap)" >&2; exit 2; }
  if ! command -v mmdebstrap >/dev/null || ! command -v bwrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends mmdebstrap bubblewrap >/dev/null
  fi
  echo "first_run: $(nproc) cores, HEAD $(git -C "$repo" rev-parse --short HEAD), a fresh Debian 12 root"
  root=$work/root
  t0=$(date +%s)
  mmdebstrap --variant=important --include=git,ca-certificates bookworm "$root" >"$work/mmdebstrap.log" 2>&1 ||
    { tail -30 "$work/mmdebstrap.log" >&2; echo "bench/first_run.sh: mmdebstrap failed" >&2; exit 1; }
  echo "  (the root: $(( $(date +%s) - t0 )) s, not timed; $(chroot "$root" dpkg-query -W | wc -l) packages)"
  git clone -q "$repo" "$root/root/throwbox"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  # This network's own certificate authorities (a TLS proxy in front of the
  # registries, say), as the machine's set-up would have put them there.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null 2>&1
  fi
  timed "scripts/run (fresh machine)" bwrap --bind "$root" / --bind /proc /proc --dev-bind /dev /dev --bind /sys /sys \
    --perms 1777 --tmpfs /tmp --die-with-parent --chdir /root/throwbox -- \
    /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    ${NODE_EXTRA_CA_CERTS:+NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt} scripts/run
  grep -A1 '^== status' "$work/step.log" | tail -1 | sed 's/^/  /'
  echo "  packages after: $(chroot "$root" dpkg-query -W | wc -l)"
  exit 0
fi

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
