#!/usr/bin/env python3
"""Round trip of a trivial MCP call (ping, tools/list) over Streamable HTTP:
throwbox (`serve --http 127.0.0.1:0`) against the TypeScript SDK's reference
server (@modelcontextprotocol/server-everything, `streamableHttp`), in the same
run, interleaved, each over one keep-alive connection (http.client). Prints
p50/p95 and the ratio throwbox/reference; the target is a throwbox p50 of at
most a quarter of the reference's. Prints figures; never fails on timing.

    npm ci --prefix bench        # the reference server
    python3 bench/http_speed.py [--bin build/throwbox] [--runs 500]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF_JS = os.path.join(REPO, "bench", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
VERSION = "2025-06-18"


def stats(samples):
    s = sorted(samples)
    p95 = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]
    return statistics.median(s), p95


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    """An MCP client over Streamable HTTP on one keep-alive connection."""

    def __init__(self, host, port, path="/mcp"):
        self.conn = http.client.HTTPConnection(host, port, timeout=30)
        self.path = path
        self.session = None
        self.next_id = 0
        self.reconnects = 0
        r = self.call("initialize", {"protocolVersion": VERSION, "capabilities": {},
                                     "clientInfo": {"name": "throwbox-http-bench", "version": "1"}})
        self.server = r.get("serverInfo", {}).get("name")
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, msg):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
            headers["MCP-Protocol-Version"] = VERSION
        if self.conn.sock is None and self.next_id > 1:
            self.reconnects += 1  # the server closed the keep-alive connection
        self.conn.request("POST", self.path, body=json.dumps(msg), headers=headers)
        resp = self.conn.getresponse()
        body = resp.read()
        if resp.status >= 300:
            sys.exit("%s: HTTP %d %s" % (msg.get("method"), resp.status, body[:200]))
        if self.session is None:
            self.session = resp.getheader("Mcp-Session-Id")
        return resp.getheader("Content-Type", ""), body

    def call(self, method, params):
        self.next_id += 1
        ctype, body = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        if "text/event-stream" in ctype:
            msgs = [json.loads(line[5:]) for line in body.decode().splitlines()
                    if line.startswith("data:") and line[5:].strip()]
        else:
            msgs = [json.loads(body)]
        for m in msgs:
            if m.get("id") == self.next_id:
                if "error" in m:
                    sys.exit("%s: %s" % (method, m["error"]))
                return m["result"]
        sys.exit("%s: no response in %r" % (method, body[:200]))


def start_throwbox(binary, work, policy, port):
    argv = [binary, "serve", "--http", "127.0.0.1:%d" % port, "--state-dir", os.path.join(work, "state"),
            "--log-level", "warn"]
    if policy:
        argv += ["--policy", policy]
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stderr.readline().decode()
        if not line:
            break
        m = re.search(r"throwbox: listening on http://127\.0\.0\.1:(\d+)/mcp", line)
        if m:
            # Keep draining stderr so the server never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, port or int(m.group(1))
    p.kill()
    sys.exit("throwbox did not print its listening line")


def start_reference():
    port = free_port()
    env = dict(os.environ, PORT=str(port))
    p = subprocess.Popen(["node", REF_JS, "streamableHttp"], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, port
        except OSError:
            if p.poll() is not None:
                break
            time.sleep(0.05)
    p.kill()
    sys.exit("the reference server did not listen on port %d" % port)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500, help="interleaved rounds (each: every call once per server)")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "throwbox"))
    ap.add_argument("--port", type=int, default=0, help="throwbox's port (default: any free one)")
    ap.add_argument("--policy", default=os.path.join(REPO, "policies", "default.json"))
    args = ap.parse_args()
    if not os.path.exists(REF_JS):
        sys.exit("reference server not installed: npm ci --prefix bench")
    if shutil.which("node") is None:
        sys.exit("node not found")
    work = tempfile.mkdtemp(prefix="throwbox-http-bench-")
    procs = []
    try:
        tb_proc, tb_port = start_throwbox(os.path.abspath(args.bin), work, args.policy, args.port)
        procs.append(tb_proc)
        ref_proc, ref_port = start_reference()
        procs.append(ref_proc)
        tb = Client("127.0.0.1", tb_port)
        ref = Client("127.0.0.1", ref_port)

        calls = [("throwbox ping", lambda: tb.call("ping", {})),
                 ("reference ping", lambda: ref.call("ping", {})),
                 ("throwbox tools/list", lambda: tb.call("tools/list", {})),
                 ("reference tools/list", lambda: ref.call("tools/list", {}))]
        samples = {name: [] for name, _ in calls}
        for _ in range(20):  # warm-up: JIT, caches, connections
            for _, fn in calls:
                fn()
        tb.reconnects = ref.reconnects = 0
        for _ in range(args.runs):
            for name, fn in calls:
                t0 = time.perf_counter()
                fn()
                samples[name].append((time.perf_counter() - t0) * 1000)

        print("throwbox HTTP round trips: %d interleaved runs per call, keep-alive connections, uid %d, %d cores, %s"
              % (args.runs, os.geteuid(), os.cpu_count(), time.strftime("%Y-%m-%d")))
        print("reference: %s (%s)" % (ref.server, os.path.relpath(REF_JS, REPO)))
        print("%-22s %10s %10s" % ("call", "p50 ms", "p95 ms"))
        for name, _ in calls:
            med, p95 = stats(samples[name])
            print("%-22s %10.3f %10.3f" % (name, med, p95))
        for what in ("ping", "tools/list"):
            t50, t95 = stats(samples["throwbox " + what])
            r50, r95 = stats(samples["reference " + what])
            print("throwbox/reference %-10s p50 %.2fx  p95 %.2fx  (target p50 <= 0.25x: %s)"
                  % (what, t50 / r50, t95 / r95, "met" if t50 <= 0.25 * r50 else "NOT met"))
        print("keep-alive reconnections during the runs: throwbox %d, reference %d" % (tb.reconnects, ref.reconnects))
        with open("/proc/%d/status" % tb_proc.pid) as f:
            rss = next((l.split()[1] for l in f if l.startswith("VmRSS:")), "?")
        print("throwbox server RSS after the runs: %s KiB" % rss)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
