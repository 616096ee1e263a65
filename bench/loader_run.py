#!/usr/bin/python3
"""The python loader's own time for one job, on the host without a sandbox.

The loader (server/broker/python_loader.h) is started as a warm sandbox
starts it (`python3 <flags> -c <loader> main.py`, its ready byte on fd 4, its
go byte on fd 3); once it is ready and the machine quiet, the go byte is
written and the time to its exit (waitpid) is taken: the job's run and the
loader's exit, what a warm call pays between pid 1's release and its reap.
Two variants, interleaved run by run: the loader as the server builds it,
and the same without its first line after the imports (the compile() that
makes the AST types before the claim), so the line's effect is a ratio in
one run. The preload is the bare interpreter's (none), the job print(1)
unless --code.
Usage: bench/loader_run.py [--runs N] [--flags='-I -S'] [--code 'print(1)']
"""
import argparse
import os
import re
import shlex
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"


def loader_source(with_compile):
    with open(os.path.join(REPO, "server", "broker", "python_loader.h")) as f:
        header = f.read()
    m = re.search(r'R"py\((.*?)\)py"', header, re.S)
    if not m:
        sys.exit("loader_run: no R\"py(...)py\" literal in server/broker/python_loader.h")
    src = m.group(1)
    for key, value in (("__THROWBOX_PROXY_ENV__", "{}"), ("__THROWBOX_CA_ENV__", "{}"),
                       ("__THROWBOX_PRELOAD__", "import gc; gc.freeze()")):
        if key not in src:
            sys.exit("loader_run: %s not in the loader" % key)
        src = src.replace(key, value)
    line = "    compile('', '<loader>', 'exec')\n"
    if line not in src:
        sys.exit("loader_run: the loader has no compile() line to leave out")
    return src if with_compile else src.replace(line, "", 1)


def one_run(argv):
    """ms from writing the go byte to reaping the loader."""
    go_r, go_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            # Above 4 first, so the moves onto 3 and 4 cannot close each other.
            a, b = os.dup(go_r), os.dup(ready_w)
            a, b = os.dup2(a, 10), os.dup2(b, 11)
            os.dup2(a, 3)
            os.dup2(b, 4)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    os.close(go_r)
    os.close(ready_w)
    if os.read(ready_r, 1) != b"r":
        sys.exit("loader_run: the loader did not say it was ready")
    time.sleep(0.05)
    t0 = time.perf_counter()
    os.write(go_w, b"1")
    _, status = os.waitpid(pid, 0)
    ms = (time.perf_counter() - t0) * 1000
    os.close(go_w)
    os.close(ready_r)
    if status != 0:
        sys.exit("loader_run: the loader exited with status %d" % status)
    return ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--flags", default="-I -S", help="the interpreter's flags, as a runtime's command has them")
    ap.add_argument("--code", default="print(1)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="throwbox-loader-run-") as work:
        main_py = os.path.join(work, "main.py")
        with open(main_py, "w") as f:
            f.write(args.code + "\n")
        variants = {name: [PYTHON] + shlex.split(args.flags) + ["-c", loader_source(w), main_py]
                    for name, w in (("as built", True), ("without the compile line", False))}
        times = {name: [] for name in variants}
        for _ in range(args.runs):
            for name, argv in variants.items():
                times[name].append(one_run(argv))
    print("python loader, go byte to exit, %s %s, %r, %d runs each, interleaved"
          % (PYTHON, args.flags, args.code, args.runs))
    base = statistics.median(times["without the compile line"])
    for name, ts in times.items():
        s = sorted(ts)
        print("  %-26s median %6.3f ms  p90 %6.3f ms  %.2fx" % (
            name, statistics.median(s), s[int(0.9 * (len(s) - 1))], statistics.median(s) / base))


if __name__ == "__main__":
    main()
