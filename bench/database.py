#!/usr/bin/python3
"""The ledger in PostgreSQL against SQLite, and several servers against one,
in the same run, on a PostgreSQL 15 cluster this script starts
(tests/database/postgres.sh, fsync on unless --no-fsync) and removes.

1. The broker's own time per call: two servers on stdio, one with the
   SQLite ledger, one with --database, called in turn (--runs each, an idle
   gap before each call so every call finds a warm sandbox). From each job's
   debug timings line: everything the broker does but the sandbox (the key's
   lookup, resolve and admit, the ledger's start, storing, the receipt, the
   ledger's end);
   the medians and their difference; calls without an idempotency key, then
   calls each with one.
2. Database round trips per call: every statement the cluster ran for
   --jobs/4 calls (it logs each: log_min_duration_statement=0; each is one
   round trip), the servers' own lease rounds left out, by statement name;
   with and without an idempotency key; and the median time the server
   spent on each (its log's duration: before the round trip back and the
   commit's flush).
3. Replicas: --jobs calls over HTTP (POST /jobs, print(1)) with --inflight in
   flight, against one server with a warm pool of 3 per runtime and against
   three servers with 1 each (the same total), all on --database, the calls
   spread round-robin; jobs/s of each, the ratio, over --rounds alternations.
Usage: bench/database.py [--runs N] [--jobs N] [--inflight N] [--rounds N] [--no-fsync] [--bin build/throwbox]
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from mcp_stdio import Stdio, wait_quiet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG = os.path.join(REPO, "tests", "database", "postgres.sh")
TIMINGS = re.compile(r"timings \(us\): resolve\+admit (\d+) ledger_start (\d+) runner (\d+) store (\d+) "
                     r"receipt (\d+) ledger_end\+cleanup (\d+)")


def psql(uri, sql):
    return subprocess.run(["psql", "-X", "-A", "-t", "-c", sql, uri], check=True, capture_output=True,
                          text=True).stdout.strip()


def write_policy(work, name, pool_size):
    with open(os.path.join(REPO, "policies", "default.json")) as f:
        p = json.load(f)
    p["pool"]["size"] = pool_size
    p["pool"]["runtimes"] = ["python"]
    p["pool"]["templates"] = ["python"]
    p["pool"].pop("first_use", None)
    p["admission"] = dict(p.get("admission", {}), jobs_running_max=8, jobs_running_per_tenant_max=8,
                          jobs_queued_max=64)
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(p, f)
    return path


def broker_time(binary, work, uri, runs, keyed):
    policy = write_policy(work, "stdio", 2)
    logs, servers = {}, {}
    for name, extra in (("sqlite", []), ("postgresql", ["--database", uri])):
        logs[name] = os.path.join(work, "%s-%s.log" % (name, "key" if keyed else "nokey"))
        servers[name] = Stdio([binary, "serve", "--state-dir", os.path.join(work, "st-" + name), "--policy", policy,
                               "--log-level", "debug"] + extra, stderr=open(logs[name], "w"))
    wall = {n: [] for n in servers}
    for _ in range(runs):
        for name, s in servers.items():
            wait_quiet(s, want=2)
            time.sleep(0.05)
            args = {"runtime": "python", "code": "print(1)"}
            if keyed:
                args["idempotency_key"] = secrets.token_hex(8)
            _, ms = s.tool("run_code", args)
            wall[name].append(ms)
    for s in servers.values():
        s.close()
    own = {}
    for name, path in logs.items():
        rows = []
        with open(path) as f:
            for line in f:
                m = TIMINGS.search(line)
                if m:
                    v = [int(g) / 1000 for g in m.groups()]
                    rows.append((sum(v) - v[2], v[0], v[1], v[5]))  # all but the runner; admit; ledger start, end
        own[name] = rows
    print("1%s. the broker's own time per call (everything but the sandbox), %d calls each, gap pattern, %s" %
          ("b" if keyed else "a", runs, "each with an idempotency key" if keyed else "no idempotency key"))
    print("   %-11s %9s %9s %9s %9s %9s" % ("ledger", "own ms", "admit ms", "start ms", "end ms", "call ms"))
    for name in servers:
        cols = list(zip(*own[name]))
        print("   %-11s %9.3f %9.3f %9.3f %9.3f %9.2f" % (name, *(statistics.median(c) for c in cols),
                                                       statistics.median(wall[name])))
    d = statistics.median(list(zip(*own["postgresql"]))[0]) - statistics.median(list(zip(*own["sqlite"]))[0])
    q = lambda xs: statistics.quantiles(xs, n=4)
    print("   postgresql - sqlite: %+.3f ms (own time, medians); quartiles sqlite %s, postgresql %s" %
          (d, ["%.3f" % x for x in q(list(zip(*own["sqlite"]))[0])],
           ["%.3f" % x for x in q(list(zip(*own["postgresql"]))[0])]))


# Statements a server sends on its own, not for a call: its lease rounds.
LEASE_STATEMENTS = {"replica_insert", "replica_renew", "jobs_lost", "tasks_lost", "slots_lost", "replicas_forget",
                    "replica_leave", "ping"}
EXECUTE = re.compile(r"duration: ([0-9.]+) ms\s+execute (\w+)")


def executes(log_path):
    """Every prepared statement the cluster ran, by name, from its log
    (log_min_duration_statement=0 logs each one once, with the time the
    server spent on it): {name: [ms, ...]} in the order run."""
    runs = {}
    with open(log_path, errors="replace") as f:
        for line in f:
            m = EXECUTE.search(line)
            if m:
                runs.setdefault(m.group(2), []).append(float(m.group(1)))
    return runs


def round_trips(binary, work, uri, pg_log, jobs):
    policy = write_policy(work, "trips", 2)
    s = Stdio([binary, "serve", "--state-dir", os.path.join(work, "st-trips"), "--policy", policy, "--database",
               uri])
    wait_quiet(s, want=2)
    print("\n2. database round trips per call (%d calls each; every statement the cluster logged, the servers' "
          "lease rounds left out)" % jobs)
    for label, key in (("no key", False), ("with a key", True)):
        before = executes(pg_log)
        for _ in range(jobs):
            args = {"runtime": "python", "code": "print(1)"}
            if key:
                args["idempotency_key"] = secrets.token_hex(8)
            s.tool("run_code", args)
        time.sleep(0.2)
        after = executes(pg_log)
        new = {k: v[len(before.get(k, [])):] for k, v in after.items() if k not in LEASE_STATEMENTS}
        new = {k: v for k, v in new.items() if v}
        print("   %-11s %.2f per call: %s" % (label, sum(len(v) for v in new.values()) / jobs,
                                             ", ".join("%s %.2f" % (k, len(v) / jobs) for k, v in sorted(new.items()))))
        # The server's own time for each (planning and running it, not the
        # round trip nor the commit's flush, which come after it logs).
        print("   %-11s in the server, median ms: %s" % ("", ", ".join(
            "%s %.3f" % (k, statistics.median(v)) for k, v in sorted(new.items()))))
    s.close()


class HttpServer:
    def __init__(self, binary, work, name, policy, tokens, uri):
        self.log = open(os.path.join(work, name + ".http.log"), "w+")
        self.p = subprocess.Popen([binary, "serve", "--http", "127.0.0.1:0", "--state-dir",
                                   os.path.join(work, "st-" + name), "--policy", policy, "--tokens", tokens,
                                   "--database", uri], stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 30
        while time.time() < deadline:
            self.log.seek(0)
            m = re.search(r"listening on http://(127\.0\.0\.1:\d+)/mcp", self.log.read())
            if m:
                self.base = "http://" + m.group(1)
                return
            time.sleep(0.05)
        sys.exit("%s did not start" % name)

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=30)


def post_job(base, token):
    req = urllib.request.Request(base + "/jobs", data=json.dumps({"runtime": "python", "code": "print(1)"}).encode(),
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        body = json.loads(r.read())
    if body.get("status") != "completed":
        sys.exit("job: " + json.dumps(body))


def throughput(bases, token, jobs, inflight):
    lock = threading.Lock()
    nxt = [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                if i >= jobs:
                    return
                nxt[0] += 1
            post_job(bases[i % len(bases)], token)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(inflight) as ex:
        for f in [ex.submit(worker) for _ in range(inflight)]:
            f.result()
    return jobs / (time.perf_counter() - t0)


def replicas(binary, work, uri, jobs, inflight, rounds):
    token = secrets.token_urlsafe(24)
    tokens = os.path.join(work, "tokens")
    with open(tokens, "w") as f:
        f.write("alice %s\n" % hashlib.sha256(token.encode()).hexdigest())
    os.chmod(tokens, 0o600)
    one_policy, three_policy = write_policy(work, "one", 3), write_policy(work, "three", 1)
    print("\n3. replicas: %d print(1) jobs over HTTP, %d in flight, round-robin; the same total warm pool" %
          (jobs, inflight))
    ratios = []
    for r in range(rounds):
        figures = {}
        for label, n, policy in (("1 server, pool 3", 1, one_policy), ("3 servers, pool 1", 3, three_policy)):
            servers = [HttpServer(binary, work, "r%d-%d-%d" % (r, n, i), policy, tokens, uri) for i in range(n)]
            try:
                time.sleep(2)  # pools filled
                throughput([s.base for s in servers], token, min(20, jobs), inflight)  # warm-up
                figures[label] = throughput([s.base for s in servers], token, jobs, inflight)
            finally:
                for s in servers:
                    s.stop()
        ratio = figures["3 servers, pool 1"] / figures["1 server, pool 3"]
        ratios.append(ratio)
        print("   round %d: %s" % (r + 1, ", ".join("%s %.1f jobs/s" % kv for kv in figures.items())) +
              ", ratio %.2f" % ratio)
    print("   ratio 3 servers / 1: median %.2f (%.2f-%.2f)" % (statistics.median(ratios), min(ratios), max(ratios)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--inflight", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-fsync", action="store_true")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "throwbox"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="throwbox-bench-db-")
    os.chmod(work, 0o711)  # the cluster runs as the user postgres, in a directory below it
    pgdir = os.path.join(work, "pg")
    env = dict(os.environ, THROWBOX_PG_FSYNC="off" if a.no_fsync else "on")
    out = subprocess.run([PG, "start", pgdir], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        sys.exit("postgres.sh start: exit %d: %s" % (out.returncode, out.stderr))
    uri = "postgresql:///postgres?host=%s&user=throwbox" % pgdir
    try:
        print("throwbox database benchmark, %s, %d cores, PostgreSQL fsync %s, %s" %
              (time.strftime("%Y-%m-%d"), os.cpu_count(), "off" if a.no_fsync else "on",
               psql(uri, "SHOW server_version")))
        broker_time(a.bin, work, uri, a.runs, keyed=False)
        broker_time(a.bin, work, uri, a.runs, keyed=True)
        # Every statement logged for the count only: logging is not in the timed parts.
        psql(uri, "ALTER SYSTEM SET log_min_duration_statement = 0")
        psql(uri, "SELECT pg_reload_conf()")
        round_trips(a.bin, work, uri, os.path.join(pgdir, "server.log"), a.jobs // 4)
        psql(uri, "ALTER SYSTEM RESET log_min_duration_statement")
        psql(uri, "SELECT pg_reload_conf()")
        replicas(a.bin, work, uri, a.jobs, a.inflight, a.rounds)
    finally:
        subprocess.run([PG, "stop", pgdir])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
