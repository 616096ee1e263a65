#!/bin/sh
# Registers throwbox with Claude Code. Adjust the path.

# Local, over stdio: Claude Code starts the server and talks to it on its stdin/stdout.
claude mcp add throwbox -- /absolute/path/to/throwbox/build/throwbox serve

# Or a shared server over Streamable HTTP (see http-server.sh), with the token
# taken from the environment when the line runs, never written in a file here:
#   claude mcp add --transport http throwbox http://127.0.0.1:8765/mcp \
#     --header "Authorization: Bearer ${THROWBOX_TOKEN:?set THROWBOX_TOKEN}"
