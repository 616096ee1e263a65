#!/usr/bin/env python3
"""Round trip of a trivial MCP call (ping, tools/list) over Streamable HTTP:
throwbox (`serve --http 127.0.0.1:0`) against the TypeScript SDK's reference
server (@modelcontextprotocol/server-everything, `streamableHttp`), in the same
run, interleaved, each over one keep-alive connection. Prints p50/p95 and the
ratio throwbox/reference; the target is a throwbox p50 of at most a quarter of
the reference's. Prints figures; never fails on timing.

The client is the same for both servers: a raw-socket HTTP/1.1 client with
TCP_NODELAY that sends each prebuilt request in one write and reads the answer
by Content-Length or chunks (JSON or SSE). It is chosen because it adds
little of its own: http.client, used before, spent about 0.25 ms per call in
header parsing (email.parser), which is most of a sub-millisecond answer and
hid the servers' own difference. A cross-check with curl (one process,
requests chained with --next on one kept-alive connection) agrees in
direction: see README.md.

    npm ci --prefix bench        # the reference server
    python3 bench/http_speed.py [--bin build/throwbox] [--runs 1000]
"""
import argparse
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
    """An MCP client over Streamable HTTP on one keep-alive TCP connection.

    A raw socket, not http.client: each call is one sendall() of a prebuilt
    request and reads of the answer (Content-Length, chunked or SSE), so the
    client adds some tens of microseconds rather than the few hundred that
    http.client's header parsing (email.parser) costs. Both servers are driven
    by this same client, on the same kind of connection, with the same headers.
    """

    def __init__(self, host, port, path="/mcp"):
        self.addr = (host, port)
        self.path = path
        self.session = None
        self.next_id = 0
        self.reconnects = 0
        self.sock = None
        self.buf = b""
        r = self.call("initialize", {"protocolVersion": VERSION, "capabilities": {},
                                     "clientInfo": {"name": "throwbox-http-bench", "version": "1"}})
        self.server = r.get("serverInfo", {}).get("name")
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def connect(self):
        self.sock = socket.create_connection(self.addr, timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def read_until(self, sep):
        while True:
            i = self.buf.find(sep)
            if i >= 0:
                out, self.buf = self.buf[:i], self.buf[i + len(sep):]
                return out
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk

    def read_exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def exchange(self, request):
        if self.sock is None:
            if self.next_id > 1:
                self.reconnects += 1  # the server closed the keep-alive connection
            self.connect()
        self.sock.sendall(request)
        head = self.read_until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        headers = {}
        for line in head[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.read_until(b"\r\n").split(b";")[0], 16)
                data = self.read_exact(size + 2)[:size]
                if size == 0:
                    break
                body += data
        else:
            body = self.read_exact(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self.sock.close()
            self.sock = None
        return status, headers, body

    def post(self, msg):
        payload = json.dumps(msg).encode()
        lines = ["POST %s HTTP/1.1" % self.path, "Host: %s:%d" % self.addr,
                 "Content-Type: application/json", "Accept: application/json, text/event-stream",
                 "Content-Length: %d" % len(payload)]
        if self.session:
            lines += ["Mcp-Session-Id: " + self.session, "MCP-Protocol-Version: " + VERSION]
        status, headers, body = self.exchange(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        if status >= 300:
            sys.exit("%s: HTTP %d %s" % (msg.get("method"), status, body[:200]))
        if self.session is None:
            self.session = headers.get("mcp-session-id")
        return headers.get("content-type", ""), body

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
    ap.add_argument("--runs", type=int, default=1000, help="interleaved rounds (each: every call once per server)")
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

        print("throwbox HTTP round trips: %d interleaved runs per call, raw-socket keep-alive client, uid %d, %d cores, %s"
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
