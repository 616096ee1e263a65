#!/usr/bin/python3
"""throwbox under bursts: many short jobs in flight at once, against the same
jobs called one at a time after an idle gap, in the same run.

Jobs:
  print    print(1)                                    runtime python
  stdlib   json, csv, statistics over a small table    runtime python
  pandas   import pandas; a DataFrame's sum            runtime python-data
Per job kind:
  gap      --gap-runs calls one at a time, each after the server is quiet
           (warm pools refilled, the last sandbox torn down) and --gap
           seconds more: chat pace, every call finds a warm sandbox
  burst C  --jobs calls with C in flight (a thread per slot over one stdio
           connection), each slot calling again as soon as its reply came;
           the burst starts from a quiet server
Reported: jobs/s over the burst's wall time, p50/p95/p99 of the calls (client
side: request written to reply read), how many started warm and cold, and
the burst's median against the gap median. Then the memory of an idle warm
sandbox per runtime (PSS of its processes, a server whose pool keeps only
that runtime). Every result is checked (completed, exit 0, stdout as
expected); a failure ends the bench.

The policy is --policy (default: the bundled policies/default.json) with its
admission and call limits raised to the largest C, so that the burst measures
how fast sandboxes are made and claimed, not the queue; the pool is the
policy's, except that a runtime it fills on first use is filled at start.
--templates on forks every pooled python runtime's sandboxes from a
template, off none, policy (the default) as the policy says (the bundled
one: python and python-data); a template's memory is reported beside its
idle sandboxes'.
Usage: bench/burst.py [--jobs N] [--inflight 1,4,16] [--kinds print,stdlib,pandas] [--templates policy|on|off]
                      [--gap-runs N] [--gap S] [--policy FILE] [--bin build/throwbox] [--json]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from mcp_stdio import Pipelined, children, comm, is_template, tree_pss_kib, tree_uss_kib, wait_quiet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STDLIB = '''\
import csv, io, json, statistics
rows = list(csv.DictReader(io.StringIO("k,v\\n" + "\\n".join("%d,%d" % (i % 7, i) for i in range(200)))))
by = {}
for r in rows:
    by.setdefault(r["k"], []).append(int(r["v"]))
print(json.dumps({k: statistics.mean(v) for k, v in sorted(by.items())})[:40])
'''
PANDAS = '''\
import pandas as pd
print(int(pd.DataFrame({"a": range(100)})["a"].sum()))
'''
# name -> (runtime, code, expected stdout)
KINDS = {
    "print": ("python", "print(1)\n", "1\n"),
    "stdlib": ("python", STDLIB, None),  # checked against the gap runs' output
    "pandas": ("python-data", PANDAS, "4950\n"),
}


def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))]


def bench_policy(policy, inflight_max, pool_runtimes=None, templates="policy"):
    p = json.loads(json.dumps(policy))
    adm = p.setdefault("admission", {})
    for key in ("jobs_running_max", "jobs_running_per_tenant_max"):
        adm[key] = max(adm.get(key, 0), inflight_max)
    adm["jobs_queued_max"] = max(adm.get("jobs_queued_max", 0), 2 * inflight_max)
    adm["cpu_seconds_per_tenant_per_hour"] = max(adm.get("cpu_seconds_per_tenant_per_hour", 0), 360000)
    srv = p.setdefault("server", {})
    srv["concurrent_calls_max"] = max(srv.get("concurrent_calls_max", 0), inflight_max + 4)
    pool = p.setdefault("pool", {})
    if pool_runtimes is not None:
        pool["runtimes"] = pool_runtimes
    pool["first_use"] = []
    # --templates on: every pooled python runtime forks from a template;
    # off: none; policy: what the policy says, within the runtimes pooled here.
    pooled = pool.get("runtimes", [])
    if templates == "on":
        pool["templates"] = [r for r in pooled if p["runtimes"][r].get("loader") == "python"]
    elif templates == "off":
        pool["templates"] = []
    else:
        pool["templates"] = [r for r in pool.get("templates", []) if r in pooled]
    return p


def idle_sandboxes(policy):
    pool = policy.get("pool", {})
    if not pool.get("enabled", True):
        return 0
    return pool.get("size", 2) * len(pool.get("runtimes", []))


class Server:
    def __init__(self, binary, work, name, policy, log=None):
        os.makedirs(os.path.join(work, name), exist_ok=True)
        self.policy_path = os.path.join(work, name, "policy.json")
        with open(self.policy_path, "w") as f:
            json.dump(policy, f)
        self.want_idle = idle_sandboxes(policy)
        # Every pooled runtime starts its interpreter ahead (a loader): a
        # sandbox is ready once its loader waits for a job.
        self.loader = all(policy["runtimes"][r].get("loader") == "python"
                          for r in policy.get("pool", {}).get("runtimes", []))
        self.client = Pipelined([binary, "serve", "--state-dir", os.path.join(work, name, "state"),
                                 "--policy", self.policy_path, "--log-level", "warn"],
                                stderr=log if log is not None else subprocess.DEVNULL)
        self.quiet_timeouts = 0

    def quiesce(self, timeout=60):
        if not wait_quiet(self.client, want=self.want_idle, timeout=timeout, loader=self.loader):
            self.quiet_timeouts += 1

    def run(self, runtime, code, want):
        """One run_code; (ms, start, stdout). Ends the bench on a failure."""
        t0 = time.perf_counter()
        r = self.client.call("tools/call", {"name": "run_code", "arguments": {"runtime": runtime, "code": code}})
        ms = (time.perf_counter() - t0) * 1000
        sc = r.get("structuredContent") or {}
        if r.get("isError") or sc.get("status") != "completed" or sc.get("exit_code") != 0:
            sys.exit("run_code (%s): status %s, exit %s, start %s, stdout %r, stderr %r, error %r" % (
                runtime, sc.get("status"), sc.get("exit_code"), sc.get("start"), sc.get("stdout", "")[:200],
                sc.get("stderr", "")[-400:], sc.get("error") or json.dumps(r)[:300]))
        out = sc.get("stdout", "")
        if want is not None and out != want:
            sys.exit("run_code (%s): stdout %r, expected %r" % (runtime, out, want))
        return ms, sc.get("start", "?"), out

    def close(self):
        self.client.close()


def burst(server, runtime, code, want, jobs, inflight):
    lat, starts, lock = [], [], threading.Lock()
    left = [jobs]
    failed = []

    def slot():
        while True:
            with lock:
                if left[0] == 0 or failed:
                    return
                left[0] -= 1
            try:
                ms, start, _ = server.run(runtime, code, want)
            except SystemExit as e:  # a thread's exit ends only the thread: the bench ends below
                with lock:
                    failed.append(str(e.code))
                return
            with lock:
                lat.append(ms)
                starts.append(start)

    threads = [threading.Thread(target=slot) for _ in range(inflight)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if failed:
        sys.exit(failed[0])
    return {"inflight": inflight, "jobs": jobs, "jobs_per_s": jobs / wall, "p50_ms": pct(lat, 0.5),
            "p95_ms": pct(lat, 0.95), "p99_ms": pct(lat, 0.99), "warm": starts.count("warm"),
            "cold": starts.count("cold")}


def idle_pss(binary, work, policy, runtime, templates="policy"):
    """PSS (KiB) of each idle warm sandbox of a server whose pool keeps only
    runtime, and of its template (None without one)."""
    server = Server(binary, work, "pss-" + runtime, bench_policy(policy, 1, [runtime], templates))
    try:
        server.quiesce()
        runners = [c for c in children(server.client.p.pid) if comm(c) == "throwbox-runner"]
        built = [r for r in runners if children(r) and children(children(r)[0])]
        kinds = [is_template(r) for r in built]
        template = [tree_pss_kib(r) for r, t in zip(built, kinds) if t]
        uss = sorted(tree_uss_kib(r) for r, t in zip(built, kinds) if not t)
        return (sorted(tree_pss_kib(r) for r, t in zip(built, kinds) if not t), (template[0] if template else None),
                uss)
    finally:
        server.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=100, help="calls per burst")
    ap.add_argument("--inflight", default="1,4,16", help="calls in flight, comma-separated")
    ap.add_argument("--kinds", default="print,stdlib,pandas")
    ap.add_argument("--gap-runs", type=int, default=20, help="calls after an idle gap, per kind")
    ap.add_argument("--gap", type=float, default=0.3, help="idle seconds before each gap call")
    ap.add_argument("--policy", default=os.path.join(REPO, "policies", "default.json"))
    ap.add_argument("--bin", default=os.environ.get("THROWBOX_BIN", os.path.join(REPO, "build", "throwbox")))
    ap.add_argument("--templates", choices=("policy", "on", "off"), default="policy",
                    help="pool.templates: the policy's, every pooled python runtime, or none")
    ap.add_argument("--server-log", help="append the burst server's warnings to this file")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    inflight = [int(x) for x in args.inflight.split(",")]
    kinds = args.kinds.split(",")
    for k in kinds:
        if k not in KINDS:
            sys.exit("unknown kind %r (print, stdlib, pandas)" % k)
    with open(args.policy) as f:
        policy = json.load(f)
    for k in kinds:
        if KINDS[k][0] not in policy.get("runtimes", {}):
            sys.exit("the policy has no runtime %r (job kind %s)" % (KINDS[k][0], k))
    binary = os.path.abspath(args.bin)
    server_log = open(args.server_log, "a") if args.server_log else None
    work = tempfile.mkdtemp(prefix="throwbox-burst-")
    os.chmod(work, 0o711)
    t_start = time.time()
    results = {"kinds": {}, "idle_pss_kib": {}}
    try:
        burst_policy = bench_policy(policy, max(inflight), templates=args.templates)
        results["templates"] = burst_policy["pool"]["templates"]
        server = Server(binary, work, "burst", burst_policy, server_log)
        log = sys.stderr
        try:
            for k in kinds:
                runtime, code, want = KINDS[k]
                server.quiesce()
                _, _, out = server.run(runtime, code, want)  # warm-up, and the expected output
                want = out if want is None else want
                gap = []
                for _ in range(args.gap_runs):
                    server.quiesce()
                    time.sleep(args.gap)
                    ms, start, _ = server.run(runtime, code, want)
                    gap.append((ms, start))
                gap_ms = [ms for ms, _ in gap]
                r = {"runtime": runtime, "gap": {"runs": len(gap), "p50_ms": statistics.median(gap_ms),
                                                  "p95_ms": pct(gap_ms, 0.95),
                                                  "warm": [s for _, s in gap].count("warm")}, "bursts": []}
                for c in inflight:
                    server.quiesce()
                    print("%s: burst of %d at %d in flight" % (k, args.jobs, c), file=log)
                    b = burst(server, runtime, code, want, args.jobs, c)
                    b["p50_vs_gap"] = b["p50_ms"] / r["gap"]["p50_ms"]
                    r["bursts"].append(b)
                results["kinds"][k] = r
        finally:
            results["quiet_timeouts"] = server.quiet_timeouts
            server.close()
        for runtime in sorted({KINDS[k][0] for k in kinds}):
            sandboxes, template, uss = idle_pss(binary, work, policy, runtime, args.templates)
            results["idle_pss_kib"][runtime] = sandboxes
            results.setdefault("idle_uss_kib", {})[runtime] = uss
            if template is not None:
                results.setdefault("template_pss_kib", {})[runtime] = template
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["seconds"] = time.time() - t_start
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print("throwbox burst benchmark: %d calls a burst, uid %d, %d cores, %s, %.0f s%s"
          % (args.jobs, os.geteuid(), os.cpu_count(), time.strftime("%Y-%m-%d"), results["seconds"],
             ", pool.templates " + ",".join(results["templates"]) if results["templates"] else ""))
    print("%-7s %-9s %9s %9s %9s %9s %10s %9s" % ("job", "pattern", "jobs/s", "p50 ms", "p95 ms", "p99 ms",
                                                  "warm/cold", "p50/gap"))
    for k, r in results["kinds"].items():
        g = r["gap"]
        print("%-7s %-9s %9s %9.1f %9.1f %9s %10s %9s" % (k, "gap", "-", g["p50_ms"], g["p95_ms"], "-",
                                                          "%d/%d" % (g["warm"], g["runs"] - g["warm"]), "1.00x"))
        for b in r["bursts"]:
            print("%-7s %-9s %9.1f %9.1f %9.1f %9.1f %10s %8.2fx" % (
                k, "burst %d" % b["inflight"], b["jobs_per_s"], b["p50_ms"], b["p95_ms"], b["p99_ms"],
                "%d/%d" % (b["warm"], b["cold"]), b["p50_vs_gap"]))
    for runtime, pss in results["idle_pss_kib"].items():
        print("idle warm sandbox, runtime %s: %s KiB PSS each; %s KiB its own pages (USS)" % (
            runtime, ", ".join(str(x) for x in pss) or "none",
            ", ".join(str(x) for x in results["idle_uss_kib"][runtime]) or "none"))
    for runtime, pss in results.get("template_pss_kib", {}).items():
        print("its template, runtime %s: %d KiB PSS" % (runtime, pss))
    if results["quiet_timeouts"]:
        print("the server was not quiet in time before %d calls" % results["quiet_timeouts"])


if __name__ == "__main__":
    main()
