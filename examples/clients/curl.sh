#!/bin/bash
# Talks to a throwbox HTTP server (see http-server.sh) with curl: initialize,
# then list the tools and run one job. Shows the Streamable HTTP exchange a
# client makes; the token comes from the environment, never from this file.
#   THROWBOX_TOKEN=... examples/clients/curl.sh
set -euo pipefail
url=${THROWBOX_URL:-http://127.0.0.1:8765/mcp}
: "${THROWBOX_TOKEN:?set THROWBOX_TOKEN to a token whose sha256 is in the tokens file of the server}"
headers=$(mktemp)
trap 'rm -f "$headers"' EXIT

post() {  # post JSON [session id]
  curl -sS --fail-with-body "$url" \
    -H "Authorization: Bearer $THROWBOX_TOKEN" \
    -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' \
    -H 'MCP-Protocol-Version: 2025-06-18' \
    ${2:+-H "Mcp-Session-Id: $2"} \
    -D "$headers" --data-binary "$1"
  echo
}

post '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'
session=$(tr -d '\r' <"$headers" | awk -F': ' 'tolower($1) == "mcp-session-id" {print $2}')
post '{"jsonrpc":"2.0","method":"notifications/initialized"}' "$session"
post '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' "$session"
post '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_code","arguments":{"runtime":"python","code":"print(6 * 7)"}}}' "$session"
