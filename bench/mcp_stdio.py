"""Shared by the benchmarks: a line-delimited JSON-RPC client for an MCP server
on stdio, and the /proc checks that tell when a throwbox server is quiet (its
warm pool refilled, the last sandbox torn down) so no background work lands
inside a timed call.
"""
import json
import os
import statistics
import subprocess
import sys
import threading
import time


def stats(samples):
    """(median, p95) of a list of numbers."""
    s = sorted(samples)
    p95 = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]
    return statistics.median(s), p95


class Stdio:
    """A line-delimited JSON-RPC client for a server on stdio."""

    def __init__(self, argv, version="2025-06-18", env=None, stderr=subprocess.DEVNULL):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env)
        self.next_id = 0
        self.lock = threading.Lock()
        self.call("initialize", {"protocolVersion": version, "capabilities": {},
                                 "clientInfo": {"name": "throwbox-bench", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()

    def call(self, method, params):
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                sys.exit("%s: the server closed its stdout (exit status %s)" % (method, self.p.poll()))
            msg = json.loads(line)
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    sys.exit("%s: %s" % (method, msg["error"]))
                return msg["result"]

    def tool(self, name, arguments):
        """tools/call; returns (structuredContent, wall ms from writing the
        request to reading the reply). An isError result ends the bench."""
        t0 = time.perf_counter()
        r = self.call("tools/call", {"name": name, "arguments": arguments})
        ms = (time.perf_counter() - t0) * 1000
        if r.get("isError"):
            text = " ".join(c.get("text", "") for c in r.get("content", []))
            sys.exit("%s: isError: %s" % (name, text or json.dumps(r)))
        return r["structuredContent"], ms

    def rss_kib(self):
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


def children(pid):
    """Children of every thread of pid (each thread lists the ones it forked)."""
    out = []
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def comm(pid):
    """The process's name, or "" once it is gone."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def tree_kib(pid, fields=("Pss",)):
    """The sum of smaps_rollup's `fields` (kB) over pid and its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/smaps_rollup" % p) as f:
                total += sum(int(l.split()[1]) for l in f if l.split(":")[0] in fields)
        except OSError:
            pass
        todo += children(p)
    return total


def tree_pss_kib(pid):
    return tree_kib(pid)


def tree_uss_kib(pid):
    """Pages no other process maps (what the tree alone costs): Private_Clean + Private_Dirty."""
    return tree_kib(pid, ("Private_Clean", "Private_Dirty"))


def is_spare(runner):
    """The runner the server starts ahead of the next cold job: no sandbox
    yet, blocked reading its spec; its one child, the zygote that will make
    pid 1, blocked reading the spec from the runner."""
    kids = children(runner)
    try:
        with open("/proc/%d/wchan" % runner) as f:
            if "pipe_read" not in f.read():
                return False
        for z in kids:
            with open("/proc/%d/comm" % z) as f:
                if f.read().strip() != "throwbox-zygote" or children(z):
                    return False
            with open("/proc/%d/wchan" % z) as f:
                if "read" not in f.read():
                    return False
    except OSError:
        return False
    return len(kids) <= 1  # none: a build from before the zygote, kept for A/B runs


def is_template(runner):
    """A runtime's template (policy pool.templates): its program keeps the
    template's listening socket at fd 6; the sandboxes forked from it do not."""
    inits = children(runner)
    if len(inits) != 1 or comm(inits[0]) != "throwbox-init":
        return False
    for program in children(inits[0]):
        try:
            if os.readlink("/proc/%d/fd/6" % program).startswith("socket:"):
                return True
        except OSError:
            pass
    return False


def idle_and_ready(runner, loader=False):
    inits = children(runner)
    # A runner whose child is still its zygote has not built its sandbox yet.
    if len(inits) != 1 or comm(inits[0]) != "throwbox-init":
        return False
    loaders = children(inits[0])
    if len(loaders) != 1:
        # An "exec" warm sandbox has no program yet; a "preload" one (loader)
        # has its loader once pid 1 has started it.
        return len(loaders) == 0 and not loader
    try:
        with open("/proc/%d/stat" % loaders[0]) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open("/proc/%d/wchan" % loaders[0]) as f:
            wchan = f.read()
    except OSError:
        return False
    return state == "S" and "pipe" in wchan


def wait_quiet(server, want=0, timeout=20, loader=False):
    """Until the server's runners are its spare runner and `want` idle warm
    sandboxes whose loaders have finished their start-up (each sleeps on its
    go pipe): nothing is being built or torn down. loader: every warm
    sandbox has one (the pool's runtimes all preload). Templates are not
    counted. False if it timed out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        runners = [c for c in children(server.p.pid) if comm(c) == "throwbox-runner"]
        spares = [r for r in runners if is_spare(r)]
        sandboxes = [r for r in runners if r not in spares and not is_template(r)]
        if len(spares) == 1 and len(sandboxes) == want and all(idle_and_ready(r, loader) for r in sandboxes):
            return True
        time.sleep(0.002)
    return False


class Pipelined(Stdio):
    """A Stdio client that keeps several calls in flight: a reader thread
    hands each reply to the thread that waits for its id."""

    def __init__(self, argv, **kw):
        super().__init__(argv, **kw)
        self.waiting = {}  # id -> [threading.Event, reply]
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            msg = json.loads(line)
            with self.lock:
                slot = self.waiting.pop(msg.get("id"), None)
            if slot is not None:
                slot[1] = msg
                slot[0].set()
        with self.lock:
            for slot in self.waiting.values():
                slot[0].set()
            self.waiting.clear()

    def call(self, method, params):
        if not hasattr(self, "reader"):  # initialize, before the reader starts
            return Stdio.call(self, method, params)
        slot = [threading.Event(), None]
        with self.lock:
            self.next_id += 1
            mid = self.next_id
            self.waiting[mid] = slot
            self.send({"jsonrpc": "2.0", "id": mid, "method": method, "params": params})
        slot[0].wait()
        msg = slot[1]
        if msg is None:
            sys.exit("%s: the server closed its stdout (exit status %s)" % (method, self.p.poll()))
        if "error" in msg:
            sys.exit("%s: %s" % (method, msg["error"]))
        return msg["result"]
