#!/usr/bin/python3
"""Sandboxes forked from a template, on throwbox-runner directly, as root.

A template runner builds a warm "preload" sandbox whose loader imports its
preload, then serves forks (LaunchSpec template_socket); job runners build
sandboxes whose program is forked from it (from_template_pid, ..._socket),
and each job is claimed with code as the broker would. Checks:
- the template's socket is 0600 and gone once the template ends;
- each job completes with every layer a warm job has (its own user, pid,
  mount, network namespaces, cgroup namespace, seccomp, Landlock when the
  kernel has it, no capabilities, no_new_privs), its program pid 1's child
  with the sandbox's ids, mapped to the job's own host id, the template's
  imports already loaded, nothing of the template visible in /proc, no
  network, fds 0-2 only;
- two jobs from one template draw different random values;
- a job naming the template's pid with another start time (a reused pid)
  is refused before anything runs, and so is a job naming a socket nothing
  listens on.
Usage: template_runner.py THROWBOX_RUNNER LIBTHROWBOX_TEMPLATE_SO
(exit 0 pass, 1 fail, 77 skip)
"""
import ctypes
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading

RUNNER, LIB = [os.path.abspath(p) if p else p for p in (sys.argv[1:3] + ["", ""])[:2]]
if os.geteuid() != 0:
    print("skip: needs root (drives throwbox-runner directly)")
    sys.exit(77)
for path in (RUNNER, LIB):
    if not os.path.exists(path):
        print("skip: no %s" % path)
        sys.exit(77)
try:
    import numpy  # noqa: F401 - the template preloads it when it is there
    PRELOAD = "json, random, numpy, numpy.random"
except ImportError:
    PRELOAD = "json, random"

# Host ids for the template and its jobs: the template's user is the
# range's first id, which its user namespace's identity map leaves out.
ID_FIRST = 2_100_000_000
ID_COUNT = 64
TEMPLATE_ID = ID_FIRST
failures = []
# This kernel's Landlock ABI (landlock_create_ruleset's version query; 0:
# none): a forked job must then report the layer.
_libc = ctypes.CDLL(None, use_errno=True)
LANDLOCK = max(0, _libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


LOADER = r"""
import os, sys, ctypes, __PRELOAD__
import gc; gc.freeze()
sys.stdout.flush()
if ctypes.CDLL(__LIB__).throwbox_template_serve(6, 4) not in (1, 2):
    os._exit(125)
random.seed()
if 'numpy.random' in sys.modules:
    sys.modules['numpy.random'].seed()
os.write(4, b'r')
os.close(4)
go = os.read(3, 1)
os.close(3)
if go not in (b'1', b'n', b'c'):
    os._exit(125)
path = sys.argv[1]
g = {'__name__': '__main__', '__file__': path, '__builtins__': __builtins__}
exec(compile(open(path, 'rb').read(), path, 'exec'), g)
sys.stdout.flush()
os._exit(0)
""".replace("__PRELOAD__", PRELOAD).replace("__LIB__", repr("/.throwbox/libthrowbox-template.so"))

JOB = r"""
import json, os, random, socket, sys
status = dict(l.split(':\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\t' in l)
pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
try:
    s = socket.create_connection(('1.1.1.1', 53), timeout=1)
    network = 'connected'
except OSError as e:
    network = type(e).__name__
with open('/tmp/x', 'w') as f:
    f.write('x')
print(json.dumps({
    'uid': os.getuid(), 'gid': os.getgid(), 'pid': os.getpid(), 'ppid': os.getppid(),
    'uid_map': open('/proc/self/uid_map').read().split(),
    'cap_eff': status['CapEff'].strip(), 'cap_bnd': status['CapBnd'].strip(),
    'no_new_privs': status['NoNewPrivs'].strip(),
    'seccomp': status['Seccomp'].strip(), 'filters': status.get('Seccomp_filters', '').strip(),
    'pids': pids, 'init': open('/proc/1/comm').read().strip(),
    'fds': sorted(int(f) for f in os.listdir('/proc/self/fd')),
    'preloaded': 'json' in sys.modules and ('numpy' in sys.modules) == ('numpy' in %r),
    'random': random.random(), 'urandom': os.urandom(8).hex(),
    'cwd': os.getcwd(), 'network': network,
}))
""" % PRELOAD


def base_spec(work, job_id, host_id):
    scratch = os.path.join(work, job_id)
    os.mkdir(scratch, 0o700)
    return {
        "job_id": job_id,
        "argv": ["/usr/bin/python3", "-I", "-c", LOADER, "/work/main.py"],
        "env": ["PATH=/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/work"],
        "code": "", "code_path": "/work/main.py", "inputs": [],
        "readonly_paths": ["/usr", "/etc/ld.so.cache", "/etc/alternatives"],
        "work_max_bytes": 1 << 24, "tmp_max_bytes": 1 << 24, "outputs_max_bytes": 1 << 20,
        "outputs_max_files": 8, "stdout_max_bytes": 65536, "stderr_max_bytes": 65536,
        "timeout_ms": 600000,
        "host_uid": host_id, "host_gid": host_id, "own_user_ns": True,
        "scratch_dir": scratch, "harvest_dir": os.path.join(scratch, "outputs"),
        "memory_max_bytes": 1 << 30, "pids_max": 64, "nofile_max": 256, "cpu_max_cores": 1,
        "cgroup_host": CGROUP_HOST,
        "require_landlock": False, "require_cgroups": False,
        "warm": "preload", "inputs_max_bytes": 1 << 20, "inputs_max_files": 4,
    }


def cgroup_host():
    """A cgroup base of this test's own, as the server's tree would give:
    (host JSON, directories to remove), or ({"mode": "none"}, []) when
    neither v1 controllers nor a cgroup2 root are there to use."""
    name = "throwbox-template-test-%s" % secrets.token_hex(4)
    mounts = [l.split() for l in open("/proc/self/mounts")]
    v1 = {}
    for ctl in ("memory", "pids", "cpu", "cpuacct"):
        for m in mounts:
            if m[2] == "cgroup" and ctl in m[3].split(","):
                v1[ctl] = m[1]
    if len(v1) == 4:
        dirs = sorted({os.path.join(mnt, name) for mnt in v1.values()})
        for d in dirs:
            os.mkdir(d)
        return {"mode": "v1", "v1_base": {c: os.path.join(m, name) for c, m in v1.items()}}, dirs
    for m in mounts:
        if m[2] == "cgroup2" and os.access(os.path.join(m[1], "cgroup.subtree_control"), os.W_OK):
            d = os.path.join(m[1], name)
            os.mkdir(d)
            try:
                with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                    f.write("+memory +pids +cpu")
            except OSError:
                os.rmdir(d)
                break
            return {"mode": "v2", "v2_base": d}, [d]
    return {"mode": "none", "why_not": "no cgroup this test can use"}, []


CGROUP_HOST = {"mode": "none", "why_not": "set in main"}


class Runner:
    """One throwbox-runner: its spec on stdin, its lines from stdout."""

    def __init__(self, spec):
        self.p = subprocess.Popen([RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, env={})
        self.p.stdin.write((json.dumps(spec) + "\n").encode())
        self.p.stdin.flush()

    def line(self):
        return json.loads(self.p.stdout.readline() or b"null")

    def claim(self, job_id, code):
        self.p.stdin.write((json.dumps({"job_id": job_id, "code": code, "inputs": [],
                                        "timeout_ms": 20000}) + "\n").encode())
        self.p.stdin.close()

    def outcome(self):
        if self.p.stdin and not self.p.stdin.closed:
            self.p.stdin.close()
        self.p.stdin = None
        out, err = self.p.communicate(timeout=60)
        lines = [l for l in out.decode().splitlines() if l.strip()]
        return json.loads(lines[-1]) if lines else {"status": "none", "error": err.decode()[-400:]}


def run_job(work, template, host_id, results, start_time=None, socket_path=None):
    job_id = secrets.token_hex(16)
    spec = base_spec(work, job_id, host_id)
    spec.update(from_template_pid=template["template_pid"],
                from_template_start_time=start_time or template["template_start_time"],
                from_template_socket=socket_path or template["socket"])
    r = Runner(spec)
    ready = r.line()
    if ready != {"warm": "ready"}:
        # A refusal before the sandbox was ready: its outcome is the first line.
        r.outcome()
        results.append(ready if isinstance(ready, dict) and "status" in ready else {"status": "not ready"})
        return
    r.claim(job_id, JOB)
    results.append(r.outcome())


def main():
    global CGROUP_HOST
    CGROUP_HOST, cgroup_dirs = cgroup_host()
    print("cgroups:", CGROUP_HOST["mode"])
    work = tempfile.mkdtemp(prefix="throwbox-template-")
    os.chmod(work, 0o755)
    template = None
    try:
        socket_path = os.path.join(work, "template.sock")
        spec = base_spec(work, secrets.token_hex(16), TEMPLATE_ID)
        spec.update(template_socket=socket_path, template_library=LIB, template_ids_first=ID_FIRST,
                    template_ids_count=ID_COUNT)
        template = Runner(spec)
        ready = template.line()
        check(isinstance(ready, dict) and ready.get("warm") == "ready" and ready.get("template_pid", 0) > 0,
              "the template is ready and names its pid 1: %s" % ready)
        if not isinstance(ready, dict) or "template_pid" not in ready:
            return
        ready["socket"] = socket_path
        mode = stat.S_IMODE(os.stat(socket_path).st_mode)
        check(mode == 0o600, "the template's socket is 0600 (%o)" % mode)

        results = []
        threads = [threading.Thread(target=run_job, args=(work, ready, ID_FIRST + 1 + i, results)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        outs = []
        for o in results:
            check(o.get("status") == "completed", "a forked job completes: %s %s" % (o.get("status"), o.get("error", "")))
            if o.get("status") != "completed":
                print(o)
                continue
            check(o.get("start") == "warm", "its start is warm")
            if CGROUP_HOST["mode"] != "none":
                check("cgroups:" + CGROUP_HOST["mode"] in o.get("layers", []), "it ran in its cgroup")
                check(o.get("peak_memory_bytes", 0) > 1 << 20, "its cgroup counted its memory (%d bytes)"
                      % o.get("peak_memory_bytes", 0))
            layers = set(o.get("layers", []))
            want = {"namespaces:user,pid,mount,net,ipc,uts,cgroup", "seccomp", "no_new_privs",
                    "capabilities_dropped", "rlimits", "fd_hygiene", "readonly_root", "pivot_root",
                    "user_limits", "host_uid:template", "template_fork"}
            if LANDLOCK:
                want.add("landlock:abi%d" % LANDLOCK)
            check(want <= layers, "its layers include %s (missing %s)" % (sorted(want), sorted(want - layers)))
            j = json.loads(o["stdout"])
            outs.append(j)
            check(j["uid"] == 1000 and j["gid"] == 1000, "it runs as the sandbox user")
            check(j["ppid"] == 1 and j["init"] == "throwbox-init", "it is pid 1's child (%s, %s)" % (j["ppid"], j["init"]))
            check(j["pids"] == sorted([1, j["pid"]]), "it sees only pid 1 and itself: %s" % j["pids"])
            check(j["cap_eff"] == "0000000000000000" and j["cap_bnd"] == "0000000000000000",
                  "no capabilities (%s, %s)" % (j["cap_eff"], j["cap_bnd"]))
            check(j["no_new_privs"] == "1" and j["seccomp"] == "2", "no_new_privs and a seccomp filter")
            check(j["filters"] in ("", "2"), "its filters: the template's and its own (%s)" % j["filters"])
            check(j["fds"] == [0, 1, 2, 3], "fds 0-2 only (and the listing's own): %s" % j["fds"])
            check(j["preloaded"], "the template's imports are already loaded")
            check(j["cwd"] == "/work", "its cwd is /work")
            check(j["network"] != "connected", "no network (%s)" % j["network"])
            check(j["uid_map"][:1] == ["1000"] and j["uid_map"][2:] == ["1"]
                  and ID_FIRST < int(j["uid_map"][1]) < ID_FIRST + ID_COUNT,
                  "its user maps to a job id of the template's range: %s" % j["uid_map"])
        if len(outs) == 2:
            check(outs[0]["uid_map"] != outs[1]["uid_map"], "the two jobs map to different host ids")
            check(outs[0]["random"] != outs[1]["random"], "two forks draw different random values")
            check(outs[0]["urandom"] != outs[1]["urandom"], "and different os.urandom bytes")

        stale = []
        run_job(work, ready, ID_FIRST + 9, stale, start_time=ready["template_start_time"] + 1)
        o = stale[0]
        check(o.get("status") == "sandbox_error" and "not the template's pid 1" in o.get("error", ""),
              "a job naming the template with another start time is refused: %s" % o.get("error"))
        nobody = []
        run_job(work, ready, ID_FIRST + 10, nobody, socket_path=os.path.join(work, "none.sock"))
        o = nobody[0]
        check(o.get("status") == "sandbox_error" and "connect" in o.get("error", ""),
              "a job naming a socket nothing listens on is refused: %s" % o.get("error"))
    finally:
        if template is not None and template.p.poll() is None:
            template.p.send_signal(signal.SIGTERM)
            try:
                print("template ended:", template.outcome().get("status"))
            except subprocess.TimeoutExpired:
                template.p.kill()
        check(not os.path.exists(os.path.join(work, "template.sock")), "the template's socket is removed")
        shutil.rmtree(work, ignore_errors=True)
        for d in cgroup_dirs:
            try:
                os.rmdir(d)
            except OSError as e:
                check(False, "the test's cgroup %s is empty at the end (%s)" % (d, e))
    sys.exit(1 if failures else 0)


main()
