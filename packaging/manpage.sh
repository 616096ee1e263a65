#!/bin/bash
# throwbox(1) from the binary's own help texts: help2man for the top-level
# --help and --version, and one section per command from `throwbox CMD
# --help`, so the page says exactly what the program says.
# Usage: packaging/manpage.sh BINARY OUT.1
set -euo pipefail
bin=$1 out=$2
command -v help2man >/dev/null || { echo "manpage.sh: help2man is missing (apt-get install help2man)" >&2; exit 1; }
include=$(mktemp)
trap 'rm -f "$include"' EXIT
# roff-safe verbatim text: backslashes escaped, a leading . or ' neutralised.
verbatim() { sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"; }
{
  for cmd in serve doctor "policy check" receipt; do
    printf '[%s]\n.nf\n' "COMMAND: ${cmd^^}"
    # shellcheck disable=SC2086
    "$bin" $cmd --help | verbatim
    printf '.fi\n\n'
  done
  printf '[FILES]\n'
  printf '.TP\n/etc/throwbox/policy.json\nThe policy read when --policy is not given (a conffile; the bundled ones are in /usr/share/throwbox/policies).\n'
  printf '.TP\n/etc/throwbox/tokens\nThe static bearer tokens of the packaged service (tenant and sha256 of the token per line).\n'
  printf '.TP\n/var/lib/throwbox\nThe packaged service'"'"'s state directory (ledger, inputs, artifacts, audit log).\n'
  printf '.TP\n/var/lib/throwbox/receipt-key.pem\nThe Ed25519 key receipts are signed with (made at first start, mode 0600; throwbox receipt key prints its public half).\n'
  printf '.TP\n/usr/libexec/throwbox/throwbox-runner\nThe per-job sandbox runner the server starts.\n'
  printf '.TP\n/usr/libexec/throwbox/throwbox-parser\nThe parser helper: the files jobs write and the requests they send are parsed there, not in the server.\n'
  printf '[SEE ALSO]\n/usr/share/doc/throwbox/README.md.gz, boundary.md.gz, operations.md.gz, http.md.gz, policy.md.gz\n'
} > "$include"
help2man --no-info --no-discard-stderr --section 1 --source "throwbox" \
  --name "MCP tool server running model-written code in disposable Linux sandboxes" \
  --include "$include" "$bin" > "$out"
