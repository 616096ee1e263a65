#!/usr/bin/python3
"""What a template's fork pays for the pages it shares, on the host.

A parent imports a runtime's preload from a policy and runs its warm-up once
(as a template does before it forks), freezes, then forks --runs children.
Each child runs, in this order, with the minor faults (page copies) and the
time of each step:
  warm-up      the runtime's warm-up again (what a fork made ahead of its
               claim runs before it says ready), or nothing with --no-warmup
  job          a small pandas job (python-data) or a csv/json job (python)
so the job's figures with and without the fork's warm-up show what the
warm-up moves off the job's path, and the warm-up's own figures what a fork
made ahead pays for it. No sandbox: the interpreter and the kernel alone.
Usage: bench/fork_pages.py [--policy policies/default.json] [--runtime python-data] [--runs 9]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOBS = {
    "python-data": "import pandas as pd\nprint(int(pd.DataFrame({'a': range(100)})['a'].sum()))\n",
    "python": "import csv, io, json\nrows = list(csv.reader(io.StringIO('a,b\\n1,2\\n')))\nprint(json.dumps(rows))\n",
}

CHILD = r'''
import gc, os, resource, sys, time
{imports}
def run(src):
    a = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = time.perf_counter()
    sys.stdout = None
    exec(compile(src, '<step>', 'exec'), {{}})
    sys.stdout = sys.__stdout__
    return (time.perf_counter() - t) * 1000, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - a
run({warmup!r})
gc.freeze()
for _ in range({runs}):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        first = run({fork_warmup!r})
        job = run({job!r})
        os.write(w, repr((first, job)).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    print(os.read(r, 4096).decode())
    os.close(r)
'''


def measure(rt, job, runs, fork_warmup):
    imports = "import " + ", ".join(rt.get("preload", [])) if rt.get("preload") else ""
    code = CHILD.format(imports=imports, warmup=rt.get("warmup") or "pass", runs=runs,
                        fork_warmup=(rt.get("warmup") or "pass") if fork_warmup else "pass", job=job)
    out = subprocess.run([rt["command"][0], "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    rows = [eval(line) for line in out.split("\n") if line.strip()]  # tuples this script printed
    med = lambda i, k: statistics.median(r[i][k] for r in rows)
    return med(0, 0), med(0, 1), med(1, 0), med(1, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default=os.path.join(REPO, "policies", "default.json"))
    ap.add_argument("--runtime", default="python-data")
    ap.add_argument("--runs", type=int, default=9)
    args = ap.parse_args()
    with open(args.policy) as f:
        rt = json.load(f)["runtimes"][args.runtime]
    job = JOBS.get(args.runtime, JOBS["python"])
    print("fork pages: runtime %s of %s, %d forks each, medians" % (args.runtime, os.path.relpath(args.policy, REPO), args.runs))
    print("%-26s %12s %14s %10s %12s" % ("the fork", "warm-up ms", "warm-up faults", "job ms", "job faults"))
    for name, fork_warmup in (("runs the warm-up first", True), ("does not", False)):
        wm, wf, jm, jf = measure(rt, job, args.runs, fork_warmup)
        print("%-26s %12.2f %14d %10.2f %12d" % (name, wm, wf, jm, jf))


if __name__ == "__main__":
    sys.exit(main())
