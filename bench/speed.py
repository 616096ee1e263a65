#!/usr/bin/python3
"""throwbox speed, measured in one run against baselines measured in the same run.

Start-up (interleaved, python printing 1, --runs each):
  bare         /usr/bin/python3 -I -S -c 'print(1)'        (DESIGN.md's baseline)
  bwrap        the same under bubblewrap, a typical locked-down set-up
  cold         run_code over MCP stdio, pool off, runtime `python3 -I -S` (the
               sandbox is built per call; the server's spare runner process,
               exec'd ahead with its zygote forked, has no sandbox)
  warm         run_code over MCP stdio, warm pool on, same runtime
  bare+site    /usr/bin/python3 -I -c 'print(1)'           (the default runtime's command)
  cold+site    run_code, the bundled default policy with the pool off
  warm+site    run_code, the bundled default policy (pool on)
Throughput: jobs per second, 1 and 2 requests in flight, cold and warm.
Memory: server RSS after the runs, an idle warm sandbox (PSS of its processes),
peak memory of a job as its cgroup reports it.
Protocol: ping and tools/list round trips over stdio, against the TypeScript
SDK's reference server (@modelcontextprotocol/server-everything, installed
into bench/node_modules with `npm ci --prefix bench`), whose echo tool is timed too.
Usage: bench/speed.py [--runs N] [--jobs N] [--bin build/throwbox]
"""
import argparse
import copy
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE = "print(1)"


def stats(samples):
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
            msg = json.loads(self.p.stdout.readline())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    sys.exit("%s: %s" % (method, msg["error"]))
                return msg["result"]

    def run_code(self):
        r = self.call("tools/call", {"name": "run_code", "arguments": {"runtime": "python", "code": CODE}})
        sc = r["structuredContent"]
        if sc["status"] != "completed":
            sys.exit("run_code: " + json.dumps(sc))
        return sc

    def pipelined(self, n, in_flight):
        """n run_code calls with up to in_flight outstanding; returns jobs/s."""
        sent = done = 0
        t0 = time.perf_counter()
        while done < n:
            while sent < n and sent - done < in_flight:
                self.next_id += 1
                sent += 1
                self.send({"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                           "params": {"name": "run_code", "arguments": {"runtime": "python", "code": CODE}}})
            msg = json.loads(self.p.stdout.readline())
            if "id" in msg:
                sc = msg["result"]["structuredContent"]
                if sc["status"] != "completed":
                    sys.exit("run_code: " + json.dumps(sc))
                done += 1
        return n / (time.perf_counter() - t0)

    def rss_kib(self):
        with open("/proc/%d/status" % self.p.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=60)


def tree_pss_kib(pid):
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open("/proc/%d/smaps_rollup" % p) as f:
                total += next(int(l.split()[1]) for l in f if l.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
        todo += children(p)
    return total


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


def idle_warm_sandboxes(server_pid):
    """PSS of each idle warm sandbox (runner, its pid 1 and loader) under the server."""
    return [tree_pss_kib(r) for r in children(server_pid) if not is_spare(r)]


def bwrap_cmd(py):
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
           "--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
           "--cap-drop", "ALL"]
    for top in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink("/" + top):
            cmd += ["--symlink", os.readlink("/" + top), "/" + top]
    return cmd + py + ["-c", CODE]


def write_policy(work, name, no_site, pool):
    with open(os.path.join(REPO, "policies", "default.json")) as f:
        doc = json.load(f)
    doc = copy.deepcopy(doc)
    if no_site:
        doc["runtimes"]["python"]["command"] = ["/usr/bin/python3", "-I", "-S"]
    doc["pool"]["enabled"] = pool
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(doc, f)
    return path


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


def wait_quiet(server, want=0, timeout=20):
    """Until the server's children are its spare runner and `want` idle warm
    sandboxes whose loaders have finished their start-up (each sleeps on its
    go pipe): nothing is being built or torn down."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        runners = children(server.p.pid)
        spares = [r for r in runners if is_spare(r)]
        sandboxes = [r for r in runners if r not in spares]
        if len(spares) == 1 and len(sandboxes) == want and all(idle_and_ready(r) for r in sandboxes):
            return
        time.sleep(0.002)


def idle_and_ready(runner):
    inits = children(runner)
    if len(inits) != 1:
        return False
    loaders = children(inits[0])
    if len(loaders) != 1:
        return len(loaders) == 0  # an "exec" warm sandbox has no program yet
    try:
        with open("/proc/%d/stat" % loaders[0]) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        with open("/proc/%d/wchan" % loaders[0]) as f:
            wchan = f.read()
    except OSError:
        return False
    return state == "S" and "pipe" in wchan


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=200, help="jobs per throughput measurement")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "throwbox"))
    args = ap.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bwrap not found: apt-get install bubblewrap")
    binary = os.path.abspath(args.bin)
    work = tempfile.mkdtemp(prefix="throwbox-bench-")
    os.chmod(work, 0o711)

    def server(name, no_site, pool):
        policy = write_policy(work, name, no_site, pool)
        return Stdio([binary, "serve", "--state-dir", os.path.join(work, name), "--policy", policy,
                      "--log-level", "warn"])

    servers = {"cold": server("cold", True, False), "warm": server("warm", True, True),
               "cold+site": server("cold-site", False, False), "warm+site": server("warm-site", False, True)}
    bare = ["/usr/bin/python3", "-I", "-S"]
    bare_site = ["/usr/bin/python3", "-I"]

    def quiesce():
        # Chat pace, and no background work inside any measurement: before
        # each call the pools have refilled and the last sandbox is torn down
        # (refilling and teardown are counted in the throughput figures).
        for name, s in servers.items():
            wait_quiet(s, want=2 if name.startswith("warm") else 0)

    variants = [
        ("bare", lambda: subprocess.run(bare + ["-c", CODE], check=True, stdout=subprocess.DEVNULL)),
        ("bwrap", lambda: subprocess.run(bwrap_cmd(bare), check=True, stdout=subprocess.DEVNULL)),
        ("cold", servers["cold"].run_code),
        ("warm", servers["warm"].run_code),
        ("bare+site", lambda: subprocess.run(bare_site + ["-c", CODE], check=True, stdout=subprocess.DEVNULL)),
        ("cold+site", servers["cold+site"].run_code),
        ("warm+site", servers["warm+site"].run_code),
    ]
    starts = {"warm": [], "warm+site": []}
    for name, fn in variants:  # warm caches once
        fn()
    samples = {name: [] for name, _ in variants}
    for _ in range(args.runs):
        for name, fn in variants:
            quiesce()
            t0 = time.perf_counter()
            r = fn()
            samples[name].append((time.perf_counter() - t0) * 1000)
            if name in starts:
                starts[name].append(r["start"])

    print("throwbox speed benchmark: %d interleaved runs each, uid %d, %d cores, %s" %
          (args.runs, os.geteuid(), os.cpu_count(), time.strftime("%Y-%m-%d")))
    print("\nstart-up, python printing 1 (ratios against bare python in the same run)")
    print("%-10s %10s %10s %8s" % ("variant", "median ms", "p95 ms", "ratio"))
    base = {"": stats(samples["bare"])[0], "+site": stats(samples["bare+site"])[0]}
    for name, _ in variants:
        med, p95 = stats(samples[name])
        ref = base["+site"] if name.endswith("+site") else base[""]
        against = "bare+site" if name.endswith("+site") else "bare"
        print("%-10s %10.2f %10.2f %7.2fx  (vs %s)" % (name, med, p95, med / ref, against))
    for name, s in starts.items():
        print("%s: %d of %d calls ran in a warm sandbox" % (name, s.count("warm"), len(s)))

    print("\nthroughput, %d jobs each (python printing 1)" % args.jobs)
    for name in ("cold", "warm"):
        for in_flight in (1, 2):
            if name == "warm":
                wait_quiet(servers[name], want=2)
            rate = servers[name].pipelined(args.jobs, in_flight)
            print("%-5s %d in flight: %6.1f jobs/s" % (name, in_flight, rate))

    print("\nmemory")
    for name in ("cold", "warm"):
        print("%-5s server RSS after the runs: %d KiB" % (name, servers[name].rss_kib()))
    wait_quiet(servers["warm+site"], want=2)
    idle = idle_warm_sandboxes(servers["warm+site"].p.pid)
    print("idle warm sandbox (default policy, python with site): %s KiB PSS each" %
          ", ".join(str(k) for k in idle))
    spares = [r for r in children(servers["cold"].p.pid) if is_spare(r)]
    print("spare runner with its zygote (started ahead of the next cold job, no sandbox): %s KiB PSS" %
          ", ".join(str(tree_pss_kib(r)) for r in spares))
    sc = servers["cold+site"].run_code()
    print("peak memory of a python job (cgroup or rusage): %d KiB" % (sc["peak_memory_bytes"] // 1024))

    print("\nprotocol round trips over stdio (%d runs, interleaved)" % (args.runs * 5))
    ref_bin = os.path.join(REPO, "bench", "node_modules", "@modelcontextprotocol", "server-everything",
                           "dist", "index.js")
    ref = None
    if os.path.exists(ref_bin):
        ref = Stdio(["node", ref_bin, "stdio"])
    else:
        print("(reference server not installed: npm ci --prefix bench)")
    tb = servers["cold"]
    calls = [("throwbox ping", lambda: tb.call("ping", {})),
             ("throwbox tools/list", lambda: tb.call("tools/list", {}))]
    if ref:
        calls += [("reference ping", lambda: ref.call("ping", {})),
                  ("reference tools/list", lambda: ref.call("tools/list", {})),
                  ("reference echo", lambda: ref.call("tools/call", {"name": "echo", "arguments": {"message": "hi"}}))]
    proto = {name: [] for name, _ in calls}
    for _, fn in calls:
        fn()
    for _ in range(args.runs * 5):
        for name, fn in calls:
            t0 = time.perf_counter()
            fn()
            proto[name].append((time.perf_counter() - t0) * 1000)
    print("%-22s %10s %10s" % ("call", "p50 ms", "p95 ms"))
    for name, _ in calls:
        med, p95 = stats(proto[name])
        print("%-22s %10.3f %10.3f" % (name, med, p95))
    if ref:
        print("throwbox ping p50 / reference echo p50: %.2fx" %
              (stats(proto["throwbox ping"])[0] / stats(proto["reference echo"])[0]))
        print("throwbox tools/list p50 / reference tools/list p50: %.2fx" %
              (stats(proto["throwbox tools/list"])[0] / stats(proto["reference tools/list"])[0]))
        ref.close()
    for s in servers.values():
        s.close()

    cold_breakdown(binary, work, args.runs)
    shutil.rmtree(work, ignore_errors=True)


TRACE_LINE = re.compile(r"runner trace: (.+?)\s+pid \S+\s+([\d.]+) ms")
TIMINGS_LINE = re.compile(r"timings \(us\): resolve\+admit (\d+) ledger_start (\d+) runner (\d+) store (\d+) "
                          r"ledger_end\+cleanup (\d+)")


def cold_breakdown(binary, work, runs):
    """Where a cold job's time goes: a separate cold server (same policy as
    `cold`) with the runner's step trace on (THROWBOX_RUNNER_TRACE, which the
    server passes to its runners) and its debug log, chat-paced calls. Each
    step is the median time from the runner reading its spec to that step."""
    policy = write_policy(work, "trace", True, False)
    log_path = os.path.join(work, "trace.log")
    with open(log_path, "w") as log:
        env = dict(os.environ, THROWBOX_RUNNER_TRACE="1")
        s = Stdio([binary, "serve", "--state-dir", os.path.join(work, "trace"), "--policy", policy,
                   "--log-level", "debug"], env=env, stderr=log)
        for _ in range(runs):
            wait_quiet(s, want=0)
            s.run_code()
        s.close()
    jobs, job, broker = [], None, []
    with open(log_path) as f:
        for line in f:
            m = TRACE_LINE.search(line)
            if m:
                if m.group(1) == "runner main":  # a runner's dump starts (the spare's main came long before)
                    job = {}
                    jobs.append(job)
                elif job is not None:
                    job[m.group(1)] = float(m.group(2))
                continue
            m = TIMINGS_LINE.search(line)
            if m:
                broker.append([int(g) / 1000 for g in m.groups()])
    jobs = [j for j in jobs if "spec read" in j and "outcome written" in j]
    if not jobs:
        print("\n(no runner trace captured)")
        return
    print("\ncold job, step by step (%d jobs; median ms after the runner read its spec)" % len(jobs))
    order = sorted(jobs[0], key=lambda k: jobs[0][k])
    for step in order:
        offsets = [j[step] - j["spec read"] for j in jobs if step in j]
        print("  %-34s %8.3f" % (step, statistics.median(offsets)))
    if broker:
        names = ("resolve+admit", "spec written, ledger start", "runner until its outcome", "artifacts stored",
                 "ledger end")
        print("broker, median ms per job: " +
              ", ".join("%s %.3f" % (n, statistics.median(col)) for n, col in zip(names, zip(*broker))))


if __name__ == "__main__":
    main()
