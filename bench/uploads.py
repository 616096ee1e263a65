#!/usr/bin/python3
"""What an upload costs as one tenant's share of the store fills: --count
upload_input calls over MCP stdio, each a distinct small file of the same
tenant, against a server with the bundled policy (its share is counted on
every put); the median of each thousand and its ratio to the first's. A put
that counted the tenant's files each time grew with them; one that reads
the tenant's usage file should not.
Usage: bench/uploads.py [--count 9000] [--bin build/throwbox]
"""
import argparse
import os
import shutil
import statistics
import tempfile

from mcp_stdio import Stdio

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=9000)
    ap.add_argument("--bin", default=os.environ.get("THROWBOX_BIN", os.path.join(REPO, "build", "throwbox")))
    a = ap.parse_args()
    state = tempfile.mkdtemp(prefix="throwbox-bench-uploads-")
    try:
        s = Stdio([a.bin, "serve", "--state-dir", state, "--policy", os.path.join(REPO, "policies", "default.json")])
        ms = []
        for i in range(a.count):
            _, t = s.tool("upload_input", {"name": "f%d.txt" % i, "content": "content %d\n" % i})
            ms.append(t)
        s.close()
    finally:
        shutil.rmtree(state, ignore_errors=True)
    print("upload_input over stdio, one tenant, %d distinct small files (wall ms from request to reply)" % a.count)
    first = statistics.median(ms[:1000])
    for start in range(0, a.count, 1000):
        part = ms[start:start + 1000]
        m = statistics.median(part)
        print("  uploads %5d-%5d: median %6.3f ms, p95 %6.3f ms, %.2fx the first thousand" %
              (start + 1, start + len(part), m, sorted(part)[int(0.95 * (len(part) - 1))], m / first))


if __name__ == "__main__":
    main()
