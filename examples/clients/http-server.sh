#!/bin/sh
# Serves throwbox over Streamable HTTP on loopback with one bearer token, for
# clients such as http-with-token.json. Adjust the path. For a service, see
# packaging/throwbox.service.in (installed by the Debian package).
set -eu
throwbox=/absolute/path/to/throwbox/build/throwbox
tokens=${THROWBOX_TOKENS_FILE:-$HOME/.config/throwbox/tokens}

if [ ! -f "$tokens" ]; then
  # A new token for tenant "local": print it once for the client, keep only its hash.
  mkdir -p "$(dirname "$tokens")"
  token=$(head -c 32 /dev/urandom | base64 | tr -d '+/=')
  (umask 077 && printf 'local %s\n' "$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)" > "$tokens")
  echo "token for the client (shown once): $token" >&2
fi

exec "$throwbox" serve --http 127.0.0.1:8765 --tokens "$tokens"
