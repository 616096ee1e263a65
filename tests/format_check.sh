#!/usr/bin/env bash
# The C++ tree follows .clang-format: clang-format 14 (Debian 12's) would
# change nothing. Exits 77 when that clang-format is not installed (another
# version formats differently, so it cannot judge).
set -uo pipefail
root=${1:?usage: format_check.sh <source dir>}
cf=$(command -v clang-format-14 || true)
[ -n "$cf" ] || { echo "skip: clang-format-14 is not installed (apt-get install clang-format-14)"; exit 77; }
cd "$root" || exit 2
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.cpp' '*.h')
else
  mapfile -t files < <(find server tools tests -name node_modules -prune -o \( -name '*.cpp' -o -name '*.h' \) -print)
fi
# One clang-format for every file: a process each costs ~0.1 s of loading
# (30 s over the tree), the formatting itself under a second. -Werror makes
# each file it would change an error line naming that file.
out=$("$cf" --style=file --dry-run -Werror "${files[@]}" 2>&1 >/dev/null)
rc=$?
if [ $rc -ne 0 ]; then
  mapfile -t bad < <(sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<<"$out" | sort -u)
  if [ ${#bad[@]} -eq 0 ]; then
    echo "clang-format failed (exit $rc):"
    echo "$out" | head -20
    exit 1
  fi
  echo "not as .clang-format lays it out (fix: $cf -i <file>):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "format: ${#files[@]} files as .clang-format lays them out"
