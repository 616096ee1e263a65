#!/usr/bin/python3
"""Sandbox start-up overhead, measured in one run, interleaved.

Variants (each runs python printing 1):
  bare       /usr/bin/python3 -I -S -c 'print(1)'
  unshare    the same under unshare(1) with user+pid+mount+net namespaces
  bwrap      the same under bubblewrap, a typical locked-down set-up
  runner     build/throwbox-runner alone: every sandbox layer, no MCP
  mcp        run_code round trip over MCP stdio to a running `throwbox serve`
Prints median, p95 and the ratio of each median to bare python's.
Usage: bench/startup.py [--runs N] [--bin build/throwbox]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = ["/usr/bin/python3", "-I", "-S"]
CODE = "print(1)"


def bwrap_cmd():
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
           "--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
           "--cap-drop", "ALL"]
    for top in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink("/" + top):
            cmd += ["--symlink", os.readlink("/" + top), "/" + top]
    return cmd + PY + ["-c", CODE]


SECCOMP = None  # the filter the server would pass, compiled once


def runner_spec(scratch, job):
    uid, gid = (65534, 65534) if os.geteuid() == 0 else (os.geteuid(), os.getegid())
    cg = {"mode": "none", "v2_base": "", "v1_base": {}, "why_not": "benchmark"}
    return {
        "job_id": job, "argv": PY + ["/work/main.py"],
        "env": ["PATH=/usr/bin:/bin", "HOME=/work", "LANG=C.UTF-8"],
        "code": CODE, "code_path": "/work/main.py", "inputs": [],
        "readonly_paths": ["/usr", "/etc/ld.so.cache"],
        "work_max_bytes": 64 << 20, "tmp_max_bytes": 64 << 20, "outputs_max_bytes": 32 << 20,
        "outputs_max_files": 64, "stdout_max_bytes": 65536, "stderr_max_bytes": 65536,
        "timeout_ms": 10000, "host_uid": uid, "host_gid": gid,
        "scratch_dir": scratch, "harvest_dir": scratch + "/outputs",
        "memory_max_bytes": 512 << 20, "pids_max": 128, "nofile_max": 256, "cpu_max_cores": 1.0,
        "cgroup_host": cg, "require_landlock": False, "require_cgroups": False,
        "seccomp_bpf_base64": SECCOMP,
    }


class Mcp:
    def __init__(self, binary, state):
        self.p = subprocess.Popen([binary, "serve", "--state-dir", state, "--log-level", "warn"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 0
        self.call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                 "clientInfo": {"name": "bench", "version": "1"}})
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
                return msg

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def stats(samples):
    s = sorted(samples)
    p95 = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]
    return statistics.median(s), p95


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "throwbox"))
    args = ap.parse_args()
    if shutil.which("bwrap") is None:
        sys.exit("bwrap not found: apt-get install bubblewrap")
    binary = os.path.abspath(args.bin)
    runner = os.path.join(os.path.dirname(binary), "throwbox-runner")
    global SECCOMP
    # As the server does: compile the filter once (no memory cgroup here).
    SECCOMP = subprocess.run([runner, "--print-seccomp", "--no-memory-cgroup"], check=True,
                             capture_output=True, text=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="throwbox-bench-")
    os.chmod(work, 0o711)
    mcp = Mcp(binary, os.path.join(work, "state"))
    run_args = {"name": "run_code", "arguments": {"runtime": "python", "code": CODE}}

    def run_bare():
        subprocess.run(PY + ["-c", CODE], check=True, stdout=subprocess.DEVNULL)

    def run_unshare():
        subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount", "--net"] + PY +
                       ["-c", CODE], check=True, stdout=subprocess.DEVNULL)

    def run_bwrap():
        subprocess.run(bwrap_cmd(), check=True, stdout=subprocess.DEVNULL)

    counter = [0]

    def run_runner():
        counter[0] += 1
        scratch = os.path.join(work, "run-%d" % counter[0])
        os.mkdir(scratch, 0o700)
        # Timed to the outcome (EOF on stdout), as the broker sees it; the
        # runner tears the namespaces down after reporting, off that path.
        p = subprocess.Popen([runner], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        p.stdin.write(json.dumps(runner_spec(scratch, "b%d" % counter[0])).encode())
        p.stdin.close()
        out = p.stdout.read()
        elapsed = time.perf_counter()
        p.wait()
        outcome = json.loads(out)
        if outcome["status"] != "completed":
            sys.exit("runner: " + json.dumps(outcome))
        shutil.rmtree(scratch)
        return elapsed

    def run_mcp():
        r = mcp.call("tools/call", run_args)
        if r["result"]["structuredContent"]["status"] != "completed":
            sys.exit("mcp: " + json.dumps(r))

    variants = [("bare", run_bare), ("unshare", run_unshare), ("bwrap", run_bwrap),
                ("runner", run_runner), ("mcp", run_mcp)]
    for _, fn in variants:  # warm caches once
        fn()
    samples = {name: [] for name, _ in variants}
    for _ in range(args.runs):
        for name, fn in variants:
            t0 = time.perf_counter()
            end = fn() or time.perf_counter()
            samples[name].append((end - t0) * 1000)
    mcp.close()
    shutil.rmtree(work, ignore_errors=True)

    bare_median, _ = stats(samples["bare"])
    print("throwbox start-up benchmark: %d interleaved runs each, uid %d, %s" %
          (args.runs, os.geteuid(), time.strftime("%Y-%m-%d")))
    print("%-8s %10s %10s %8s" % ("variant", "median ms", "p95 ms", "x bare"))
    for name, _ in variants:
        med, p95 = stats(samples[name])
        print("%-8s %10.2f %10.2f %8.2f" % (name, med, p95, med / bare_median))
    print("runner: every layer but cgroups, filter precompiled as the server does, timed to its outcome; "
          "mcp: the whole run_code round trip "
          "(protocol, broker, runner, cgroups where the server has them)")


if __name__ == "__main__":
    main()
