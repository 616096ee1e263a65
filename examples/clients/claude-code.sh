#!/bin/sh
# Registers throwbox with Claude Code (stdio transport). Adjust the path.
claude mcp add throwbox -- /absolute/path/to/throwbox/build/throwbox serve
