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
bad=()
for f in "${files[@]}"; do
  "$cf" --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "not as .clang-format lays it out (fix: $cf -i <file>):"
  printf '  %s\n' "${bad[@]}"
  exit 1
fi
echo "format: ${#files[@]} files as .clang-format lays them out"
