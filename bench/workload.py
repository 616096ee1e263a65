#!/usr/bin/python3
"""throwbox speed on the work agents send, against the same code run bare in the same run.

Jobs (written as an agent writes them; they read /inputs/orders.csv, a
deterministic 2,000-row orders table uploaded once with upload_input, and
write to /outputs):
  print1        print(1)
  csv_decimal   csv + decimal: totals per customer, a summary CSV
  numpy_sim     numpy Monte Carlo: 200,000 random walks of 50 steps, statistics
  pandas_group  pandas read_csv, groupby region and customer, a result CSV
  mpl_chart     matplotlib (Agg) bar chart of the totals per region, a PNG
Each job runs
  bare          /usr/bin/python3 -I job.py on the host, in a temporary
                directory, /inputs and /outputs replaced by temporary
                directories; host caches warm (each job runs once before
                timing, so matplotlib's font cache in the user's cache
                directory exists, as for someone running it locally)
  run_code      over MCP stdio against `throwbox serve` with --policy
                (default: the bundled policies/default.json) and --runtime
                (default: the policy's python runtime)
Every run_code result is checked (status completed, exit code 0, the expected
artifact accepted by the gate, stdout as bare printed it); any failure ends
the bench. Wall time is client-side: a bare run from spawning python to its
exit, a run_code call from writing the request to reading the reply.

Measured interleaved: each round takes the patterns in alternating order and
the jobs in a shuffled order, each job bare and through run_code (which goes
first alternates). Before every timed call the bench waits until the server
is quiet (its warm pool refilled, the last sandbox torn down, seen in /proc);
the "gap" pattern then sleeps --gap seconds, so the CPUs are idle when the
call arrives (chat pace), "b2b" calls at once. mpl_chart is also run bare
with an empty matplotlib config directory (MPLCONFIGDIR), as every sandbox
starts, to show what the font cache costs.

Reported per pattern: bare and run_code median and p95, the ratio of the
medians, how many calls started warm and cold, the in-sandbox duration_ms
median and the time outside the program; then the targets as a checklist.
Usage: bench/workload.py [--runs N] [--gap S] [--pattern gap|b2b|both]
                         [--policy policies/data.json] [--runtime NAME]
                         [--bin build/throwbox] [--json]
"""
import argparse
import decimal
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from mcp_stdio import Stdio, stats, wait_quiet

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
INPUT = "orders.csv"

CSV_DECIMAL = '''\
import csv
from collections import defaultdict
from decimal import Decimal

totals = defaultdict(Decimal)
orders = defaultdict(int)
with open("/inputs/orders.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["customer"]] += Decimal(row["amount"])
        orders[row["customer"]] += 1

with open("/outputs/customer_totals.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["customer", "orders", "total"])
    for customer in sorted(totals, key=totals.get, reverse=True):
        w.writerow([customer, orders[customer], totals[customer]])

grand = sum(totals.values())
print(f"{len(totals)} customers, {sum(orders.values())} orders, total {grand}")
top = max(totals, key=totals.get)
print(f"top customer: {top} with {totals[top]}")
'''

NUMPY_SIM = '''\
import numpy as np

rng = np.random.default_rng(20240601)
walks, steps = 200_000, 50
moves = rng.integers(0, 2, size=(walks, steps), dtype=np.int8) * 2 - 1
paths = np.cumsum(moves, axis=1, dtype=np.int16)
final = paths[:, -1]
peak = np.abs(paths).max(axis=1)

print(f"{walks} walks x {steps} steps")
print(f"final position: mean {final.mean():.4f}, std {final.std():.3f} (sqrt(n) = {steps ** 0.5:.3f})")
print(f"P(max |excursion| >= 15): {(peak >= 15).mean():.4f}")
print(f"5/50/95% quantiles of the final position: {np.quantile(final, [0.05, 0.5, 0.95]).tolist()}")
'''

PANDAS_GROUP = '''\
import pandas as pd

df = pd.read_csv("/inputs/orders.csv")
summary = (df.groupby(["region", "customer"], as_index=False)
             .agg(orders=("order_id", "count"), total=("amount", "sum"), mean=("amount", "mean"))
             .sort_values(["region", "total"], ascending=[True, False]))
summary.to_csv("/outputs/region_customer.csv", index=False, float_format="%.2f")
print(summary.groupby("region")["total"].sum().round(2).to_string())
print(f"{len(summary)} region/customer pairs")
'''

MPL_CHART = '''\
import csv
from collections import defaultdict

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

totals = defaultdict(float)
with open("/inputs/orders.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["region"]] += float(row["amount"])

regions = sorted(totals)
fig, ax = plt.subplots(figsize=(6, 4))
ax.bar(regions, [totals[r] for r in regions], color="tab:blue")
ax.set_title("Order totals by region")
ax.set_ylabel("amount")
fig.tight_layout()
fig.savefig("/outputs/region_totals.png", dpi=100)
print("saved region_totals.png:", ", ".join(f"{r} {totals[r]:.2f}" for r in regions))
'''

# name, code, reads the input, expected artifact (name, media type) or None
JOBS = [
    ("print1", "print(1)\n", False, None),
    ("csv_decimal", CSV_DECIMAL, True, ("customer_totals.csv", "text/csv")),
    ("numpy_sim", NUMPY_SIM, False, None),
    ("pandas_group", PANDAS_GROUP, True, ("region_customer.csv", "text/csv")),
    ("mpl_chart", MPL_CHART, True, ("region_totals.png", "image/png")),
]
NOCACHE = "mpl_chart"  # also run bare with an empty MPLCONFIGDIR


def orders_csv(rows=2000, seed=7):
    """A deterministic orders table: order_id,customer,amount,region."""
    rng = random.Random(seed)
    customers = ["Acme Ltd", "Birch & Co", "Cobalt Systems", "Delta Foods", "Evergreen GmbH", "Fjord AS",
                 "Granite LLC", "Harbor Supply", "Ion Labs", "Juniper SA", "Kestrel Inc", "Lumen Oy",
                 "Maple Trading", "Nimbus BV", "Orchid KK", "Pinecone Ltd", "Quarry Works", "Riverside Inc",
                 "Saffron SRL", "Tundra AB", "Umber Partners", "Vantage plc", "Willow & Sons", "Yarrow Co"]
    regions = ["North", "South", "East", "West"]
    home = {c: regions[i % len(regions)] for i, c in enumerate(customers)}
    lines = ["order_id,customer,amount,region"]
    for i in range(rows):
        c = rng.choice(customers)
        region = home[c] if rng.random() < 0.8 else rng.choice(regions)
        amount = decimal.Decimal(rng.randint(500, 250000)) / 100
        lines.append("%d,%s,%s,%s" % (100001 + i, c, amount, region))
    return "\n".join(lines) + "\n"


def load_policy(path):
    with open(path) as f:
        return json.load(f)


def default_runtime(policy):
    runtimes = policy.get("runtimes", {})
    if "python" in runtimes:
        return "python"
    pool = policy.get("pool", {})
    for name in pool.get("runtimes", []):
        if name in runtimes:
            return name
    sys.exit("the policy has no python runtime: pass --runtime")


def pool_size(policy, runtime):
    """Idle warm sandboxes the server keeps for this runtime (0: every job is cold)."""
    pool = policy.get("pool", {})
    if not pool.get("enabled", False) or runtime not in pool.get("runtimes", []):
        return 0
    return int(pool.get("size", 0))


def idle_sandboxes(policy, runtime):
    """Idle warm sandboxes of every runtime once the pool has refilled: a
    pool.first_use runtime only once it was asked for (this bench asks only for `runtime`)."""
    pool = policy.get("pool", {})
    if not pool.get("enabled", False):
        return 0
    lazy = pool.get("first_use", [])
    return sum(pool_size(policy, r) for r in pool.get("runtimes", []) if r not in lazy or r == runtime)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Bare:
    """Runs a job on the host: /inputs and /outputs become temporary directories."""

    def __init__(self, work, csv_text):
        self.root = os.path.join(work, "bare")
        self.inputs = os.path.join(self.root, "inputs")
        self.outputs = os.path.join(self.root, "outputs")
        self.cwd = os.path.join(self.root, "cwd")
        for d in (self.inputs, self.outputs, self.cwd):
            os.makedirs(d)
        with open(os.path.join(self.inputs, INPUT), "w") as f:
            f.write(csv_text)
        self.files = {}

    def prepare(self, name, code):
        path = os.path.join(self.root, name + ".py")
        with open(path, "w") as f:
            f.write(code.replace("/inputs/", self.inputs + "/").replace("/outputs/", self.outputs + "/"))
        self.files[name] = path

    def run(self, name, artifact, env=None):
        """Returns (wall ms, stdout, sha256 of the artifact or None)."""
        shutil.rmtree(self.outputs)
        os.makedirs(self.outputs)
        t0 = time.perf_counter()
        p = subprocess.run([PYTHON, "-I", self.files[name]], cwd=self.cwd, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ms = (time.perf_counter() - t0) * 1000
        if p.returncode != 0:
            sys.exit("bare %s: exit %d\n%s" % (name, p.returncode, p.stderr.decode(errors="replace")))
        digest = None
        if artifact:
            path = os.path.join(self.outputs, artifact[0])
            if not os.path.exists(path):
                sys.exit("bare %s: wrote no %s" % (name, artifact[0]))
            digest = sha256_file(path)
        return ms, p.stdout.decode(errors="replace"), digest


def check_result(name, sc, artifact, want_stdout):
    """Ends the bench unless the run_code result is what the job should give."""
    if sc.get("status") != "completed" or sc.get("exit_code") != 0:
        sys.exit("run_code %s: status %s, exit_code %s, error %s\nstderr: %s" %
                 (name, sc.get("status"), sc.get("exit_code"), sc.get("error"), sc.get("stderr", "")[-2000:]))
    arts = sc.get("artifacts", [])
    bad = [a for a in arts if a.get("verdict") != "accepted"]
    if bad:
        sys.exit("run_code %s: the artifact gate did not accept: %s" %
                 (name, "; ".join("%s %s (%s): %s" % (a.get("name"), a.get("verdict"), a.get("media_type"),
                                                      a.get("reason")) for a in bad)))
    if artifact:
        found = [a for a in arts if a.get("name") == artifact[0]]
        if not found:
            sys.exit("run_code %s: no artifact %s among %s" % (name, artifact[0], [a.get("name") for a in arts]))
        if found[0].get("media_type") != artifact[1]:
            sys.exit("run_code %s: %s came back as %s, not %s" %
                     (name, artifact[0], found[0].get("media_type"), artifact[1]))
    elif arts:
        sys.exit("run_code %s: unexpected artifacts %s" % (name, [a.get("name") for a in arts]))
    if want_stdout is not None and sc.get("stdout") != want_stdout:
        sys.exit("run_code %s: stdout differs from the bare run\nbare:\n%s\nrun_code:\n%s" %
                 (name, want_stdout, sc.get("stdout")))
    return arts


def main():
    ap = argparse.ArgumentParser(description="throwbox speed on agent-like jobs, against bare python")
    ap.add_argument("--runs", type=int, default=10, help="rounds (each job once per pattern per round)")
    ap.add_argument("--gap", type=float, default=0.3, help="idle seconds before each timed call (gap pattern)")
    ap.add_argument("--pattern", choices=("gap", "b2b", "both"), default="both")
    ap.add_argument("--policy", default=os.path.join(REPO, "policies", "default.json"))
    ap.add_argument("--runtime", help="run_code's runtime (default: the policy's python runtime)")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "throwbox"))
    ap.add_argument("--seed", type=int, default=1, help="seed of the job order")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    args = ap.parse_args()
    if args.gap == 0 and args.pattern == "both":
        args.pattern = "b2b"
    patterns = {"gap": [("gap", args.gap)], "b2b": [("b2b", 0.0)],
                "both": [("gap", args.gap), ("b2b", 0.0)]}[args.pattern]
    binary = os.path.abspath(args.bin)
    policy_path = os.path.abspath(args.policy)
    policy = load_policy(policy_path)
    runtime = args.runtime or default_runtime(policy)
    want_idle = idle_sandboxes(policy, runtime)
    log = sys.stderr

    work = tempfile.mkdtemp(prefix="throwbox-workload-")
    os.chmod(work, 0o711)
    csv_text = orders_csv()
    bare = Bare(work, csv_text)
    for name, code, _, _ in JOBS:
        bare.prepare(name, code)
    nocache_env = dict(os.environ)

    server = Stdio([binary, "serve", "--state-dir", os.path.join(work, "state"), "--policy", policy_path,
                    "--log-level", "warn"])
    up, _ = server.tool("upload_input", {"name": INPUT, "content": csv_text})
    input_id = up["input_id"]
    quiet_timeouts = [0]

    def quiesce(gap):
        if not wait_quiet(server, want=want_idle):
            quiet_timeouts[0] += 1
        if gap:
            time.sleep(gap)

    def run_code(name, code, reads):
        a = {"runtime": runtime, "code": code}
        if reads:
            a["input_ids"] = [input_id]
        return server.tool("run_code", a)

    # Warm the host caches (and check both sides agree) once before timing.
    expected = {}
    print("warming up: each job once bare and once through run_code", file=log)
    for name, code, reads, artifact in JOBS:
        _, out, digest = bare.run(name, artifact)
        ms, out2, _ = bare.run(name, artifact)
        expected[name] = out
        if out2 != out:
            sys.exit("bare %s: stdout differs between two runs (the job is not deterministic)" % name)
        quiesce(0)
        sc, _ = run_code(name, code, reads)
        arts = check_result(name, sc, artifact, out)
        if artifact:
            got = [a for a in arts if a["name"] == artifact[0]][0]["sha256"]
            if got != digest:
                print("note: %s's %s differs from the bare run's (sha256 %s vs %s)" %
                      (name, artifact[0], got[:12], digest[:12]), file=log)
    cache_dir = subprocess.run([PYTHON, "-I", "-c", "import matplotlib; print(matplotlib.get_cachedir())"],
                               stdout=subprocess.PIPE, check=True).stdout.decode().strip()
    fontlists = [f for f in os.listdir(cache_dir) if f.startswith("fontlist")] if os.path.isdir(cache_dir) else []
    if not fontlists:
        sys.exit("the host's matplotlib font cache is not in %s after the warm-up" % cache_dir)

    rng = random.Random(args.seed)
    bare_ms = {(p, n): [] for p, _ in patterns for n, _, _, _ in JOBS}
    rc_ms = {k: [] for k in bare_ms}
    rc_dur = {k: [] for k in bare_ms}
    rc_start = {k: [] for k in bare_ms}
    nocache_ms = {p: [] for p, _ in patterns}
    uptime_before = os.getloadavg()
    t_start = time.time()
    for rnd in range(args.runs):
        print("round %d of %d" % (rnd + 1, args.runs), file=log)
        for pat, gap in (patterns if rnd % 2 == 0 else patterns[::-1]):
            jobs = list(JOBS)
            rng.shuffle(jobs)
            for i, (name, code, reads, artifact) in enumerate(jobs):
                key = (pat, name)
                order = ("bare", "run_code") if (rnd + i) % 2 == 0 else ("run_code", "bare")
                for side in order:
                    quiesce(gap)
                    if side == "bare":
                        ms, out, _ = bare.run(name, artifact)
                        if out != expected[name]:
                            sys.exit("bare %s: stdout changed" % name)
                        bare_ms[key].append(ms)
                    else:
                        sc, ms = run_code(name, code, reads)
                        check_result(name, sc, artifact, expected[name])
                        rc_ms[key].append(ms)
                        rc_dur[key].append(sc.get("duration_ms", 0))
                        rc_start[key].append(sc.get("start", "?"))
                if name == NOCACHE:
                    quiesce(gap)
                    nocache_env["MPLCONFIGDIR"] = tempfile.mkdtemp(dir=work, prefix="mplconfig-")
                    ms, _, _ = bare.run(name, artifact, env=nocache_env)
                    nocache_ms[pat].append(ms)
                    shutil.rmtree(nocache_env["MPLCONFIGDIR"])
    elapsed = time.time() - t_start
    load_after = os.getloadavg()
    server.close()
    shutil.rmtree(work, ignore_errors=True)

    results = {"runs": args.runs, "gap_s": args.gap, "policy": os.path.relpath(policy_path, REPO)
               if policy_path.startswith(REPO + os.sep) else os.path.basename(policy_path),
               "runtime": runtime, "pool_idle": want_idle, "cores": os.cpu_count(), "uid": os.geteuid(),
               "date": time.strftime("%Y-%m-%d"), "elapsed_s": round(elapsed, 1),
               "loadavg_before": uptime_before, "loadavg_after": load_after,
               "quiet_wait_timeouts": quiet_timeouts[0], "patterns": {}, "targets": []}
    for pat, gap in patterns:
        rows = {}
        for name, _, _, _ in JOBS:
            key = (pat, name)
            bm, bp = stats(bare_ms[key])
            rm, rp = stats(rc_ms[key])
            dm = stats(rc_dur[key])[0]
            warm = [ms for ms, s in zip(rc_ms[key], rc_start[key]) if s == "warm"]
            rows[name] = {"bare_median_ms": bm, "bare_p95_ms": bp, "run_code_median_ms": rm, "run_code_p95_ms": rp,
                          "ratio": rm / bm, "warm": rc_start[key].count("warm"), "cold": rc_start[key].count("cold"),
                          "duration_ms_median": dm, "outside_ms_median": stats([a - b for a, b in
                                                                                zip(rc_ms[key], rc_dur[key])])[0],
                          "warm_median_ms": stats(warm)[0] if warm else None,
                          "bare_ms": bare_ms[key], "run_code_ms": rc_ms[key], "duration_ms": rc_dur[key],
                          "start": rc_start[key]}
        nm, np95 = stats(nocache_ms[pat])
        results["patterns"][pat] = {"gap_s": gap, "jobs": rows,
                                    "mpl_chart_bare_empty_config": {"median_ms": nm, "p95_ms": np95,
                                                                    "samples": nocache_ms[pat]}}
        for name, _, _, _ in JOBS:
            r = rows[name]
            results["targets"].append({"pattern": pat, "target": "%s <= 0.5x bare" % name,
                                       "value": r["ratio"], "met": r["ratio"] <= 0.5})
        r = rows["mpl_chart"]
        results["targets"].append({"pattern": pat, "target": "mpl_chart <= 0.25x bare", "value": r["ratio"],
                                   "met": r["ratio"] <= 0.25})
        r = rows["print1"]
        v = r["warm_median_ms"] / r["bare_median_ms"] if r["warm_median_ms"] is not None else None
        results["targets"].append({"pattern": pat, "target": "print1 warm <= 0.3x bare", "value": v,
                                   "met": v is not None and v <= 0.3})

    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()
        return
    print("throwbox workload benchmark: %d interleaved rounds, policy %s, runtime %s (%d idle warm sandboxes), "
          "uid %d, %d cores, %s, %.0f s" % (args.runs, results["policy"], runtime, want_idle, os.geteuid(),
                                             os.cpu_count(), results["date"], elapsed))
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (uptime_before + load_after))
    if quiet_timeouts[0]:
        print("warning: %d waits for a quiet server timed out" % quiet_timeouts[0])
    for pat, gap in patterns:
        how = ("%.2f s idle gap before each call" % gap) if gap else "back to back"
        print("\n%s: %s, after the refill wait; ms, wall time client-side" % (pat, how))
        print("%-13s %9s %9s %9s %9s %7s %10s %9s %9s" % ("job", "bare p50", "bare p95", "rc p50", "rc p95",
                                                        "ratio", "warm/cold", "in-box", "outside"))
        for name, _, _, _ in JOBS:
            r = results["patterns"][pat]["jobs"][name]
            print("%-13s %9.1f %9.1f %9.1f %9.1f %6.2fx %10s %9.1f %9.1f" %
                  (name, r["bare_median_ms"], r["bare_p95_ms"], r["run_code_median_ms"], r["run_code_p95_ms"],
                   r["ratio"], "%d/%d" % (r["warm"], r["cold"]), r["duration_ms_median"], r["outside_ms_median"]))
        nc = results["patterns"][pat]["mpl_chart_bare_empty_config"]
        print("mpl_chart bare with an empty MPLCONFIGDIR (font cache rebuilt, as in every sandbox): "
              "p50 %.1f ms, p95 %.1f ms" % (nc["median_ms"], nc["p95_ms"]))
    print("\n(in-box: the result's duration_ms median, the program's time in the sandbox; outside: median of "
          "wall minus duration_ms per call)")
    print("\ntargets (reported, never enforced)")
    for t in results["targets"]:
        v = "n/a" if t["value"] is None else "%.2fx" % t["value"]
        print("  [%s] %-4s %-26s %s" % ("x" if t["met"] else " ", t["pattern"], t["target"], v))


if __name__ == "__main__":
    main()
