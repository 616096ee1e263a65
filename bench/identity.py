#!/usr/bin/python3
"""What each sandbox identity costs a cold run_code, in one run.

Three servers, the bundled policy with the pool off and python `-I -S`
printing 1, calls interleaved across them with an idle gap between calls:
  own           the server as root: a host uid per sandbox from sandbox.uid_range
  subordinate   the server as a user with /etc/subuid and /etc/subgid ranges:
                its zygote maps one through newuidmap/newgidmap (two set-uid execs)
  shared        the server as a user without them: every sandbox has its uid
Prints the median and p95 of the client's wall time per call and the ratios to
`own`. Needs root (it switches to the two users with setpriv); the users are
the test suite's (scripts/test creates them).
Usage: bench/identity.py [--runs N] [--gap S] [--bin build/throwbox]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from speed import REPO, Stdio, stats, write_policy  # noqa: E402

USERS = {"subordinate": "throwbox-test", "shared": "throwbox-test-shared"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--gap", type=float, default=0.3, help="idle seconds between calls")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "throwbox"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("identity.py: run as root (it starts servers as the test users)")
    for user in USERS.values():
        if subprocess.run(["id", user], capture_output=True).returncode != 0:
            sys.exit("identity.py: user %s is missing (scripts/test creates it)" % user)

    work = tempfile.mkdtemp(prefix="throwbox-bench-identity.")
    os.chmod(work, 0o755)
    try:
        # World-readable copies: the build tree may be under a root-only directory.
        for name in ("throwbox", "throwbox-runner", "throwbox-parser"):
            shutil.copy(os.path.join(os.path.dirname(args.bin), name), work)
        policy = write_policy(work, "cold", no_site=True, pool=False)
        os.chmod(policy, 0o644)
        servers = {}
        for mode in ("own", "subordinate", "shared"):
            state = os.path.join(work, "state-" + mode)
            os.mkdir(state)
            argv = [os.path.join(work, "throwbox"), "serve", "--state-dir", state, "--policy", policy]
            if mode != "own":
                user = USERS[mode]
                shutil.chown(state, user, user)
                argv = ["setpriv", "--reuid=" + user, "--regid=" + user, "--clear-groups", "--inh-caps=-all"] + argv
            servers[mode] = Stdio(argv, env={"PATH": "/usr/bin:/bin", "HOME": work})
        layers = {}
        for mode, s in servers.items():  # one warm-up call each, and what it reports
            sc = s.run_code()
            layers[mode] = [l for l in sc["sandbox_layers"] if l.startswith("host_uid")]
        samples = {m: [] for m in servers}
        for _ in range(args.runs):
            for mode, s in servers.items():
                time.sleep(args.gap)
                t0 = time.perf_counter()
                s.run_code()
                samples[mode].append((time.perf_counter() - t0) * 1000)
        for s in servers.values():
            s.close()
        base = stats(samples["own"])[0]
        print("cold run_code, python -I -S print(1), %d runs each, %.1f s gaps, interleaved" % (args.runs, args.gap))
        for mode in servers:
            med, p95 = stats(samples[mode])
            print("  %-12s %-22s median %6.1f ms  p95 %6.1f ms  x%.2f of own" %
                  (mode, " ".join(layers[mode]), med, p95, med / base))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
