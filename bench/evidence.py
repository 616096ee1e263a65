#!/usr/bin/env python3
"""What acceptance checks and receipts add to a call.

Two servers side by side, interleaved, each with the reconciliation example's
policy (examples/reconcile/policy.json): A as shipped (runtime python requires
the reconcile check), B the same without the required check. Before each
timed call the bench waits until the server is quiet (its warm pool refilled)
and then an idle gap, then runs the revised reconciliation on the example's
inputs. It prints:

  added  = median(A) - median(B): what the required check adds to a call
  warm   = median of print(1) on B: one warm start (and a call's overhead)
  own    = median of the check program run bare (/usr/bin/python3 -I over a
           copy of the job's view, CHECK_JOB_DIR): the check's own run time
  target: added <= warm + own

and, from the servers' debug log, the time to build and sign each receipt
(target: at most 0.2 ms a call) and the ledger's end-of-job write that stores
it with the result.

With --pattern b2b each call follows the last at once (the pool refilling
behind it): the job and its check then compete for the warm sandboxes.

  bench/evidence.py [--runs 30] [--pattern gap|b2b] [--gap 0.3] [--bin build/throwbox]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcp_stdio import Stdio, stats, wait_quiet  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "reconcile")
TIMINGS = re.compile(r"job (\w+) timings \(us\): .* receipt (\d+) ledger_end\+cleanup (\d+)")


def quantiles(samples):
    s = sorted(samples)
    med, p95 = stats(s)
    return "median %.2f  p95 %.2f  min %.2f  max %.2f  (n=%d)" % (med, p95, s[0], s[-1], len(s))


def server(binary, work, name, policy):
    state = os.path.join(work, "state-" + name)
    log = open(os.path.join(work, name + ".log"), "w")
    s = Stdio([binary, "serve", "--state-dir", state, "--policy", policy, "--log-level", "debug"], stderr=log)
    ids = []
    for f in ("orders.csv", "payments.csv"):
        with open(os.path.join(EXAMPLE, "inputs", f)) as h:
            up, _ = s.tool("upload_input", {"name": f, "content": h.read()})
        ids.append(up["input_id"])
    return s, ids, log


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--gap", type=float, default=0.3, help="idle seconds before each timed call")
    ap.add_argument("--pattern", choices=("gap", "b2b"), default="gap",
                    help="gap: a quiet server and an idle gap before each call; b2b: each call right after the last")
    ap.add_argument("--bin", default=os.environ.get("THROWBOX_BIN", os.path.join(REPO, "build", "throwbox")))
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="throwbox-evidence-")
    os.chmod(work, 0o755)
    try:
        run(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(args, work):
    with open(os.path.join(EXAMPLE, "policy.json")) as f:
        policy = json.load(f)
    shutil.copy(os.path.join(EXAMPLE, "check_reconcile.py"), work)
    os.chmod(os.path.join(work, "check_reconcile.py"), 0o644)
    with_check = os.path.join(work, "with-check.json")
    without = os.path.join(work, "without.json")
    json.dump(policy, open(with_check, "w"))
    policy["runtimes"]["python"]["required_checks"] = []
    json.dump(policy, open(without, "w"))
    code = open(os.path.join(EXAMPLE, "reconcile.py")).read()
    want_idle = policy["pool"]["size"]

    a, ids_a, log_a = server(args.bin, work, "a", with_check)
    b, ids_b, log_b = server(args.bin, work, "b", without)

    def call(s, ids, c):
        if args.pattern == "gap":
            wait_quiet(s, want=want_idle)
            time.sleep(args.gap)
        return s.tool("run_code", {"runtime": "python", "code": c, "input_ids": ids, "timeout_s": 10})

    # Once each, unmeasured: caches warm, and the check passes.
    sc, _ = call(a, ids_a, code)
    if [c["verdict"] for c in sc["checks"]] != ["pass"]:
        sys.exit("the reconcile check did not pass: %s" % json.dumps(sc["checks"]))
    sc_b, _ = call(b, ids_b, code)
    if sc_b["checks"]:
        sys.exit("server B ran checks")

    # The check's view, for its bare runs.
    view = os.path.join(work, "view")
    os.makedirs(os.path.join(view, "inputs"))
    os.makedirs(os.path.join(view, "artifacts"))
    for f in ("orders.csv", "payments.csv"):
        shutil.copy(os.path.join(EXAMPLE, "inputs", f), os.path.join(view, "inputs", f))
    art = [x for x in sc_b["artifacts"] if x["name"] == "exceptions.csv"][0]
    fetched = b.call("tools/call", {"name": "fetch_artifact", "arguments": {"artifact_id": art["artifact_id"]}})
    texts = [c["text"] for c in fetched.get("content", []) if c.get("type") == "text"
             and len(c["text"].encode()) == art["size"]]
    if not texts:
        sys.exit("fetch_artifact gave no text of exceptions.csv's size: %s" % json.dumps(fetched)[:400])
    with open(os.path.join(view, "artifacts", "exceptions.csv"), "w") as f:
        f.write(texts[0])
    json.dump({"status": sc_b["status"], "exit_code": sc_b["exit_code"], "stdout": sc_b["stdout"],
               "stderr": sc_b["stderr"], "artifacts": sc_b["artifacts"]}, open(os.path.join(view, "result.json"), "w"))
    env = dict(os.environ, CHECK_JOB_DIR=view)
    check_cmd = ["/usr/bin/python3", "-I", os.path.join(work, "check_reconcile.py")]
    probe = subprocess.run(check_cmd, env=env, capture_output=True, text=True)
    if '"pass"' not in probe.stdout.strip().splitlines()[-1]:
        sys.exit("the bare check did not pass: %s %s" % (probe.stdout, probe.stderr))

    t_a, t_b, t_warm, t_own, check_ms = [], [], [], [], []
    for i in range(args.runs):
        order = [0, 1, 2, 3] if i % 2 == 0 else [3, 2, 1, 0]
        for step in order:
            if step == 0:
                sc, ms = call(a, ids_a, code)
                t_a.append(ms)
                check_ms.append(sc["checks"][0]["duration_ms"])
            elif step == 1:
                _, ms = call(b, ids_b, code)
                t_b.append(ms)
            elif step == 2:
                _, ms = call(b, [], "print(1)")
                t_warm.append(ms)
            else:
                if args.pattern == "gap":
                    time.sleep(args.gap)
                t0 = time.perf_counter()
                subprocess.run(check_cmd, env=env, capture_output=True)
                t_own.append((time.perf_counter() - t0) * 1000)
    a.close()
    b.close()
    log_a.close()
    log_b.close()

    receipt_us, ledger_us = [], []
    for name in ("a", "b"):
        for line in open(os.path.join(work, name + ".log")):
            m = TIMINGS.search(line)
            if m:
                receipt_us.append(int(m.group(2)))
                ledger_us.append(int(m.group(3)))

    med = statistics.median
    added = med(t_a) - med(t_b)
    bound = med(t_warm) + med(t_own)
    print("runs %d, pattern %s%s, binary %s" % (args.runs, args.pattern,
                                                 " (gap %.1f s)" % args.gap if args.pattern == "gap" else "", args.bin))
    print("call, required check (A), ms      %s" % quantiles(t_a))
    print("call, no check (B), ms            %s" % quantiles(t_b))
    print("print(1) on B (warm start), ms    %s" % quantiles(t_warm))
    print("check program bare (own), ms      %s" % quantiles(t_own))
    print("check duration_ms in A's results  %s" % quantiles(check_ms))
    print("added = median(A) - median(B)     %.2f ms" % added)
    print("target: added <= warm + own       %.2f <= %.2f ms: %s  (ratio %.2f)"
          % (added, bound, "met" if added <= bound else "NOT met", added / bound))
    print("receipt built and signed, ms      %s" % quantiles([u / 1000 for u in receipt_us]))
    print("ledger end write (with receipt), ms %s" % quantiles([u / 1000 for u in ledger_us]))
    print("target: receipt <= 0.2 ms         median %.3f ms: %s"
          % (med(receipt_us) / 1000, "met" if med(receipt_us) <= 200 else "NOT met"))


if __name__ == "__main__":
    main()
