#!/usr/bin/env bash
# The whole suite leaves nothing on the host. `snapshot` runs first
# (a ctest fixture) and records what throwbox-like state already exists;
# `check` runs after every other test and fails on anything new: a throwbox
# cgroup, a throwbox process, a mount or a temp directory of the tests.
# Usage: host_leftovers.sh snapshot|check FILE
set -euo pipefail
what=${1:?snapshot|check}
file=${2:?FILE}

state() {
  # cgroups: the shared bases, per-server directories and what is in them
  find /sys/fs/cgroup -mindepth 1 -type d \
    \( -name throwbox -o -name 'server-*-*-*' -o -name 'throwbox-server-*' -o -name 'job-*' \) 2>/dev/null |
    grep -E '/(throwbox|(throwbox-)?server-[0-9]+-[0-9]+-[0-9]+)(/|$)' | sed 's/^/cgroup /' || true
  # processes by name (the server, its runners, zygotes and sandbox inits)
  # (pgrep -x takes one name of at most 15 bytes at a time)
  for name in throwbox throwbox-runner throwbox-parser throwbox-init throwbox-zygote throwbox.real; do
    pgrep -x "$name" | while read -r pid; do
      echo "process $pid $(tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null)"
    done || true
  done
  # mounts the tests make (as_user.sh binds node_modules into its stage)
  grep -F ' /tmp/throwbox-' /proc/self/mountinfo | awk '{print "mount " $5}' || true
  # temp directories of the tests and servers, and the temp files of tools
  # the suite runs (lintian's ELF index, mldbm-elf-*)
  find "${TMPDIR:-/tmp}" /tmp -maxdepth 1 \( -name 'throwbox-*' -o -name 'mldbm-*' \) 2>/dev/null | sort -u | sed 's/^/tmp /' || true
}
# Everything at the top of the temp directories: new entries are listed (not
# failed: other programs on the host write there too).
tmp_entries() { find "${TMPDIR:-/tmp}" /tmp -mindepth 1 -maxdepth 1 2>/dev/null | sort -u; }

case $what in
  snapshot)
    state | sort >"$file"
    tmp_entries >"$file.tmp"
    echo "host state before the suite: $(wc -l <"$file") throwbox entries (those are not counted against it)"
    ;;
  check)
    [ -f "$file" ] || { echo "no snapshot $file: run the whole suite (ctest), not this test alone"; exit 77; }
    # Servers and runners end asynchronously after their test: a moment's grace.
    for _ in $(seq 1 50); do
      new=$(comm -13 "$file" <(state | sort))
      [ -z "$new" ] && break
      sleep 0.1
    done
    if [ -f "$file.tmp" ]; then
      other=$(comm -13 "$file.tmp" <(tmp_entries) | grep -vxF "$file.tmp" || true)
      [ -z "$other" ] || { echo "new in the temp directory during the suite (not counted; check they are not the suite's):"; echo "$other" | sed 's/^/  /'; }
    fi
    if [ -n "$new" ]; then
      echo "left on the host by the suite:"
      echo "$new"
      exit 1
    fi
    echo "nothing left on the host: no throwbox cgroup, process, mount or temp directory beyond the snapshot"
    ;;
  *) echo "host_leftovers.sh: snapshot|check" >&2; exit 2 ;;
esac
