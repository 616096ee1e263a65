#!/usr/bin/python3
"""throwbox speed, measured in one run against baselines measured in the same run.

Start-up (interleaved, python printing 1, --runs each):
  bare         /usr/bin/python3 -I -S -c 'print(1)'        (the baseline the ratios use)
  bwrap        the same under bubblewrap, a typical locked-down set-up
  cold         run_code over MCP stdio, pool off, runtime `python3 -I -S` (the
               sandbox is built per call; the server's spare runner process,
               exec'd ahead with its zygote forked, has no sandbox)
  warm         run_code over MCP stdio, warm pool on, same runtime
  bare+site    /usr/bin/python3 -I -c 'print(1)'           (the default runtime's command)
  cold+site    run_code, the bundled default policy with the pool off
  warm+site    run_code, the bundled default policy (pool on)
Every variant (bwrap too) is timed in two patterns, interleaved round by round:
after waiting for the warm pools to refill and the last sandbox to be torn
down, "gap" sleeps --gap seconds (default 0.3, chat pace: the CPUs are idle
when the call arrives) before the call, "b2b" calls at once. Each pattern has
its own table, with ratios against bare measured in the same pattern.
Throughput: jobs per second, 1 and 2 requests in flight, cold and warm.
Memory: server RSS after the runs, an idle warm sandbox (PSS of its processes),
peak memory of a job as its cgroup reports it.
Protocol: ping and tools/list round trips over stdio, against the TypeScript
SDK's reference server (@modelcontextprotocol/server-everything, installed
into bench/node_modules with `npm ci --prefix bench`), whose echo tool is timed too.
Usage: bench/speed.py [--runs N] [--jobs N] [--gap S] [--bin build/throwbox]
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
import time

from mcp_stdio import Stdio, children, is_spare, stats, tree_pss_kib, wait_quiet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE = "print(1)"


class Client(Stdio):
    """The shared client with the calls this benchmark times."""

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--jobs", type=int, default=200, help="jobs per throughput measurement")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "throwbox"))
    ap.add_argument("--gap", type=float, default=0.3,
                    help="idle seconds before each timed start-up call in the gap pattern (0: back to back only)")
    ap.add_argument("--trace-only", action="store_true",
                    help="only the whole-call step traces (warm and cold), --runs calls each")
    args = ap.parse_args()
    if not args.trace_only and shutil.which("bwrap") is None:
        sys.exit("bwrap not found: apt-get install bubblewrap")
    binary = os.path.abspath(args.bin)
    work = tempfile.mkdtemp(prefix="throwbox-bench-")
    os.chmod(work, 0o711)
    trace_gap = args.gap if args.gap > 0 else 0.3  # the whole-call trace is always chat-paced
    if args.trace_only:
        for pool in (True, False):
            call_breakdown(binary, work, args.runs, trace_gap, pool)
        shutil.rmtree(work, ignore_errors=True)
        return

    def server(name, no_site, pool):
        policy = write_policy(work, name, no_site, pool)
        return Client([binary, "serve", "--state-dir", os.path.join(work, name), "--policy", policy,
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
    # Two patterns, interleaved round by round (which goes first alternates):
    # "gap" sleeps --gap seconds after the refill wait, so the CPUs are idle
    # when the call arrives, as at chat pace; "b2b" calls right after it.
    patterns = [("gap", args.gap), ("b2b", 0.0)] if args.gap > 0 else [("b2b", 0.0)]
    for name, fn in variants:  # warm caches once
        fn()
    samples = {(pat, name): [] for pat, _ in patterns for name, _ in variants}
    starts = {(pat, name): [] for pat, _ in patterns for name in ("warm", "warm+site")}
    for run in range(args.runs):
        for pat, gap in (patterns if run % 2 == 0 else patterns[::-1]):
            for name, fn in variants:
                quiesce()
                if gap:
                    time.sleep(gap)
                t0 = time.perf_counter()
                r = fn()
                samples[(pat, name)].append((time.perf_counter() - t0) * 1000)
                if (pat, name) in starts:
                    starts[(pat, name)].append(r["start"])

    print("throwbox speed benchmark: %d interleaved runs each, uid %d, %d cores, %s" %
          (args.runs, os.geteuid(), os.cpu_count(), time.strftime("%Y-%m-%d")))
    for pat, gap in patterns:
        how = ("with a %.2f s idle gap before each call" % gap) if gap else "back to back"
        print("\nstart-up, python printing 1, %s, after the refill wait (ratios against bare python "
              "in the same pattern and run)" % how)
        print("%-10s %10s %10s %8s" % ("variant", "median ms", "p95 ms", "ratio"))
        base = {"": stats(samples[(pat, "bare")])[0], "+site": stats(samples[(pat, "bare+site")])[0]}
        for name, _ in variants:
            med, p95 = stats(samples[(pat, name)])
            ref = base["+site"] if name.endswith("+site") else base[""]
            against = "bare+site" if name.endswith("+site") else "bare"
            print("%-10s %10.2f %10.2f %7.2fx  (vs %s)" % (name, med, p95, med / ref, against))
        for name in ("warm", "warm+site"):
            s = starts[(pat, name)]
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
    for pool in (True, False):
        call_breakdown(binary, work, args.runs, trace_gap, pool)
    shutil.rmtree(work, ignore_errors=True)


TRACE_LINE = re.compile(r"runner trace: (.+?)\s+pid \S+\s+([\d.]+) ms")
# Both halves carry CLOCK_MONOTONIC ("at N ms"), the clock of time.monotonic_ns().
RUNNER_AT = re.compile(r"runner trace: (.+?)\s+pid \S+\s+[\d.]+ ms\s+\(\+[\d.]+\) at ([\d.]+) ms")
CALL_AT = re.compile(r"call trace: (.+?)\s{2,}\S*\s+at ([\d.]+) ms")


def call_breakdown(binary, work, runs, gap, pool):
    """Where a whole run_code call's time goes, from the client's write of the
    request to its read of the reply: the server's marks (util/call_trace.h:
    stdin read, the call on a worker, the job admitted, ledger, claim or spec
    written, outcome read, artifacts stored, reply written) and the runner's
    (sandbox/trace.h), all on CLOCK_MONOTONIC, each call's marks being those
    inside its window. Chat-paced: `gap` idle seconds before each call."""
    policy = write_policy(work, "calltrace-%s" % ("warm" if pool else "cold"), True, pool)
    log_path = os.path.join(work, "calltrace.log")
    windows = []
    with open(log_path, "w") as log:
        env = dict(os.environ, THROWBOX_RUNNER_TRACE="1")
        s = Client([binary, "serve", "--state-dir", os.path.join(work, "calltrace"), "--policy", policy],
                   env=env, stderr=log)
        for _ in range(runs):
            wait_quiet(s, want=2 if pool else 0)
            time.sleep(gap)
            t0 = time.monotonic_ns() / 1e6
            sc = s.run_code()
            t1 = time.monotonic_ns() / 1e6
            if pool and sc.get("start") != "warm":
                continue
            windows.append((t0, t1))
        s.close()
    marks = []
    with open(log_path) as f:
        for line in f:
            m = RUNNER_AT.search(line) or CALL_AT.search(line)
            if m:
                marks.append((float(m.group(2)), m.group(1).strip()))
    marks.sort()
    per_step = {}
    for t0, t1 in windows:
        seen = set()
        for at, step in marks:
            if t0 <= at <= t1 and step not in seen:
                seen.add(step)
                per_step.setdefault(step, []).append(at - t0)
        per_step.setdefault("reply read by the client", []).append(t1 - t0)
    if not windows or len(per_step) < 3:
        print("\n(no call trace captured)")
        return
    print("\n%s run_code, the whole call step by step (%d calls, %.2f s idle gap before each; median ms after "
          "the client wrote the request)" % ("warm" if pool else "cold", len(windows), gap))
    prev = 0.0
    for step, offsets in sorted(per_step.items(), key=lambda kv: statistics.median(kv[1])):
        med = statistics.median(offsets)
        print("  %-36s %8.3f  (+%.3f)%s" % (step, med, med - prev,
                                            "" if len(offsets) == len(windows) else "  [%d calls]" % len(offsets)))
        prev = med
TIMINGS_LINE = re.compile(r"timings \(us\): resolve\+admit (\d+) ledger_start (\d+) runner (\d+) store (\d+) "
                          r"receipt (\d+) ledger_end\+cleanup (\d+)")


def cold_breakdown(binary, work, runs):
    """Where a cold job's time goes: a separate cold server (same policy as
    `cold`) with the runner's step trace on (THROWBOX_RUNNER_TRACE, which the
    server passes to its runners) and its debug log, chat-paced calls. Each
    step is the median time from the runner reading its spec to that step."""
    policy = write_policy(work, "trace", True, False)
    log_path = os.path.join(work, "trace.log")
    with open(log_path, "w") as log:
        env = dict(os.environ, THROWBOX_RUNNER_TRACE="1")
        s = Client([binary, "serve", "--state-dir", os.path.join(work, "trace"), "--policy", policy,
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
                 "receipt signed", "ledger end")
        print("broker, median ms per job: " +
              ", ".join("%s %.3f" % (n, statistics.median(col)) for n, col in zip(names, zip(*broker))))


if __name__ == "__main__":
    main()
