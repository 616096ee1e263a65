#!/usr/bin/python3
"""The template's fork on its own (server/sandbox/template_fork.h), as root:
a template (this interpreter's child: python with the shared object, the
loader's template line in effect) forks programs into job namespaces made
here the way a sandbox's pid 1 has them (a user namespace mapping the
sandbox user to an unprivileged host id, mount namespace pivoted into a
root with /work, net, UTS, IPC, cgroup and pid namespaces), playing the
runner's part of the exchange. Checks that each program:
- reports Started with its pid in the job's pid namespace and its layers,
- is the job pid 1's child (reparented there), with the sandbox's ids,
- has no capabilities, no_new_privs, a seccomp filter, fds 0-4 only (and
  the report pipe), its cwd /work,
- runs Python with the template's imports, and its random state, numpy's
  global generator and tempfile's names differ from another fork's.
Usage: template_fork_probe.py LIBTHROWBOX_TEMPLATE_SO  (exit 0 pass, 1 fail, 77 skip)
THROWBOX_PROBE_NO_RESEED=1 leaves the reseed out: the random and numpy
checks must then fail (what shows that they can; tempfile notices a fork by
its pid, which here differs from the template's anyway).
Prints each fork's time from the request to the program's Started record.
"""
import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

LIB = sys.argv[1] if len(sys.argv) > 1 else ""
if os.geteuid() != 0:
    print("skip: needs root (namespaces, id maps)")
    sys.exit(77)
if not os.path.exists(LIB):
    print("skip: no %s" % LIB)
    sys.exit(77)

try:
    import numpy  # noqa: F401 - the template imports it, as a python-data one does
except ImportError:
    print("skip: no numpy (apt-get install python3-numpy)")
    sys.exit(77)

libc = ctypes.CDLL(None, use_errno=True)
CLONE = dict(USER=0x10000000, NS=0x20000, NET=0x40000000, UTS=0x4000000, IPC=0x8000000, PID=0x20000000,
             CGROUP=0x2000000)
HOST_ID = 2123456  # an unprivileged host id for the fake sandbox's user
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def errno_check(r, what):
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def job_pid1(root):
    """A process in fresh namespaces, pivoted into root, sleeping as a pid 1
    (reaping). Returns (its host pid, the pipe its reaps are reported on)."""
    go_r, go_w = os.pipe()
    reaped_r, reaped_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_w)
        try:
            errno_check(libc.unshare(CLONE["USER"] | CLONE["NS"] | CLONE["NET"] | CLONE["UTS"] | CLONE["IPC"]
                                     | CLONE["CGROUP"] | CLONE["PID"]), "unshare")
            os.write(reaped_w, b"u")
            os.read(go_r, 1)  # the id maps are written
            child = os.fork()  # pid 1 of the new pid namespace
            if child:
                os.write(reaped_w, struct.pack("i", child))  # its pid as the host sees it
                os._exit(0)
            os.setresgid(1000, 1000, 1000)
            os.setresuid(1000, 1000, 1000)
            errno_check(libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None), "mount private")  # MS_REC|MS_PRIVATE
            errno_check(libc.mount(root.encode(), root.encode(), None, 0x1000 | 0x4000, None), "bind root")
            errno_check(libc.mount(b"proc", (root + "/proc").encode(), b"proc", 0, None), "mount /proc")
            os.chdir(root)
            errno_check(libc.syscall(155, b".", b"old"), "pivot_root")  # SYS_pivot_root
            os.chdir("/")
            errno_check(libc.umount2(b"/old", 2), "umount old")  # MNT_DETACH
            os.write(reaped_w, b"p")  # pivoted
            while True:
                try:
                    p, st = os.waitpid(-1, 0)
                    os.write(reaped_w, struct.pack("ii", p, st))
                except ChildProcessError:
                    time.sleep(0.01)
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            os.write(reaped_w, b"E" + str(e).encode()[:200])
            os._exit(1)
    os.close(go_r)
    if os.read(reaped_r, 1) != b"u":
        raise RuntimeError("the job's namespaces were not made")
    for f, line in (("uid_map", "1000 %d 1\n" % HOST_ID), ("setgroups", "deny"), ("gid_map", "1000 %d 1\n" % HOST_ID)):
        with open("/proc/%d/%s" % (pid, f), "w") as fh:
            fh.write(line)
    os.write(go_w, b"g")
    os.close(go_w)
    os.waitpid(pid, 0)  # the intermediate exits; pid 1 was reparented to init
    pid1 = struct.unpack("i", os.read(reaped_r, 4))[0]
    said = os.read(reaped_r, 200)
    if said != b"p":
        raise RuntimeError("the job's pid 1 failed: %r" % said)
    return pid1, reaped_r


TEMPLATE = r'''
import os, sys, ctypes, random, tempfile, numpy
next(tempfile._get_candidate_names())  # as an import that made a temporary file would
import gc; gc.freeze()
if ctypes.CDLL(%r).throwbox_template_serve(6, 4) not in (1, 2):
    os._exit(125)
m = sys.modules
if not %r:
    m['random'].seed()
    m['numpy.random'].seed()
    m['tempfile']._name_sequence = None
m = None
os.write(4, b'r')
go = os.read(3, 1)
st = open('/proc/self/status').read()
field = lambda k: st.split(k + ':')[1].split('\n')[0].strip()
print(os.getpid(), os.getppid(), os.getuid(), os.getgid(), field('CapEff'), field('CapBnd'), field('NoNewPrivs'),
      field('Seccomp'), os.getcwd(), sorted(os.listdir('/proc/self/fd')), random.random(),
      float(numpy.random.random()), next(tempfile._get_candidate_names()))
sys.stdout.flush()
os._exit(0)
''' % (LIB, os.environ.get("THROWBOX_PROBE_NO_RESEED") == "1")


def request(last_cap, limits, filt, ahead=0):
    """template_fork::Request (version 2) and its filter: 4 x 4 bytes, then 9 x
    (int32, pad, uint64), then filter_len and ahead (uint32 each)."""
    return struct.pack("IIiI", 0x74626f78, 2, last_cap, 0) + \
        b"".join(struct.pack("i4xQ", r, v) for r, v in limits) + struct.pack("II", 1, ahead) + filt


def main():
    work = tempfile.mkdtemp(prefix="throwbox-tfork-")
    state = {"template": None, "pid1s": []}
    try:
        run(work, state)
    finally:
        if state["template"]:
            state["template"].kill()
            state["template"].wait()
        for p in state["pid1s"]:
            try:
                os.kill(p, 9)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
        with open("/proc/self/mountinfo") as f:
            mine = [line.split()[4] for line in f if work in line.split()[4]]
        for m in sorted(mine, reverse=True):
            subprocess.run(["umount", "-l", m], check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", work], check=False)
    print("%d failed" % len(failures))
    sys.exit(1 if failures else 0)


def run(work, state):
    os.chmod(work, 0o755)
    listen_path = os.path.join(work, "template.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(listen_path)
    listener.listen(8)
    ready_r, ready_w = os.pipe()
    def place_fds():
        # Out of the way first: under ctest the low numbers may be these very fds.
        listen_high = fcntl.fcntl(listener.fileno(), fcntl.F_DUPFD, 20)
        ready_high = fcntl.fcntl(ready_w, fcntl.F_DUPFD, 20)
        os.dup2(listen_high, 6)
        os.dup2(ready_high, 4)
        # No other copy of the pipe's write end: its EOF says the template closed fd 4.
        for fd in {listen_high, ready_high, ready_w, ready_r, listener.fileno()} - {4, 6}:
            os.close(fd)

    template = subprocess.Popen(["/usr/bin/python3", "-I", "-c", TEMPLATE], preexec_fn=place_fds, close_fds=False)
    state["template"] = template
    os.close(ready_w)
    listener.close()
    check(os.read(ready_r, 1) == b"r", "the template says ready once its imports are done")
    # Then closes its end (EOF here): from now on its descriptors are its loop's.
    check(os.read(ready_r, 1) == b"", "and closes its ready pipe")
    # An allow-everything filter: one instruction, SECCOMP_RET_ALLOW.
    filt = struct.pack("HBBI", 0x06, 0, 0, 0x7fff0000)
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    limits = [(7, 256)] + [(7, 256)] * 8  # RLIMIT_NOFILE, nine times (the table's size)
    outputs = []
    # Refused, and the template serves on: a request whose magic is wrong,
    # and a right one with descriptors too many. Each connection is closed
    # without a hello, no fork is made, and the template keeps none of the
    # descriptors it was sent.
    fds_before = len(os.listdir("/proc/%d/fd" % template.pid))
    good = request(last_cap, limits, filt)
    bad = struct.pack("I", 0x0badf00d) + good[4:]
    for what, body, nfds in (("a wrong magic", bad, 6), ("eight descriptors for six", good, 8),
                             ("ahead neither 0 nor 1", request(last_cap, limits, filt, ahead=2), 6)):
        spare = [os.open("/dev/null", os.O_RDONLY) for _ in range(nfds)]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(listen_path)
        socket.send_fds(conn, [body], spare)
        for fd in spare:
            os.close(fd)
        conn.settimeout(10)
        try:
            answer = conn.recv(1)
        except ConnectionResetError:
            answer = b""
        check(answer == b"", "a request with %s is refused (the connection closed, no hello)" % what)
        conn.close()
    fds_after = len(os.listdir("/proc/%d/fd" % template.pid))
    check(fds_after == fds_before, "the template kept none of the refused requests' descriptors (%d before, %d after)"
          % (fds_before, fds_after))
    for n in range(2):
        root = os.path.join(work, "root%d" % n)
        os.makedirs(os.path.join(root, "work"))
        os.makedirs(os.path.join(root, "proc"))
        os.makedirs(os.path.join(root, "old"))
        os.chmod(root, 0o755)
        os.chown(os.path.join(root, "work"), HOST_ID, HOST_ID)
        # the interpreter's files, at their paths: /usr and /lib bound read-only
        for d in ("usr", "lib", "lib64", "bin", "etc", "dev"):
            os.makedirs(os.path.join(root, d), exist_ok=True)
            subprocess.run(["mount", "--bind", "-o", "ro", "/" + d, os.path.join(root, d)], check=True)
        pid1, reaped = job_pid1(root)
        state["pid1s"].append(pid1)
        pidfd = os.pidfd_open(pid1)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        report_r, report_w = os.pipe()
        go_r, go_w = os.pipe()
        ready2_r, ready2_w = os.pipe()
        req = request(last_cap, limits, filt)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        conn.connect(listen_path)
        t0 = time.perf_counter()
        socket.send_fds(conn, [req], [pidfd, out_w, err_w, report_w, go_r, ready2_w])
        for fd in (pidfd, out_w, err_w, report_w, go_r, ready2_w):
            os.close(fd)
        msg, anc, _, _ = conn.recvmsg(1, socket.CMSG_SPACE(12))
        cpid = struct.unpack("iII", anc[0][2][:12])[0] if anc else -1
        check(msg == b"h" and cpid > 0, "fork %d: C says hello with its credentials (pid %d)" % (n, cpid))
        conn.send(b"j")
        report = os.read(report_r, 64)
        print("     fork %d: request to Started %.2f ms" % (n, (time.perf_counter() - t0) * 1000))
        check(len(report) == 12 and struct.unpack("iiI", report)[0] == 0,
              "fork %d: the program reports Started (%r)" % (n, report[:12]))
        if len(report) == 12:
            _, ns_pid, layers = struct.unpack("iiI", report)
            check(ns_pid > 1 and layers != 0, "fork %d: its pid %d in the job's namespace, layers %#x" % (n, ns_pid, layers))
        check(os.read(ready2_r, 1) == b"r", "fork %d: the loader says ready on the job's pipe" % n)
        os.write(go_w, b"1")
        out = b""
        while True:
            b = os.read(out_r, 4096)
            if not b:
                break
            out += b
        err = os.read(err_r, 4096)
        check(err == b"", "fork %d: nothing on stderr (%r)" % (n, err[:300]))
        outputs.append(out.decode().split())
        p, st = struct.unpack("ii", os.read(reaped, 8))
        check(os.WIFEXITED(st) and os.WEXITSTATUS(st) == 0, "fork %d: pid 1 reaped its program (status %d)" % (n, st))
        conn.close()
    for n, o in enumerate(outputs):
        if len(o) < 13:
            check(False, "fork %d: the program's line %r" % (n, o))
            continue
        pid, ppid, uid, gid, capeff, capbnd, nnp, sec, cwd = o[:9]
        check(ppid == "1", "fork %d: the program is pid 1's child (ppid %s)" % (n, ppid))
        check(uid == "1000" and gid == "1000", "fork %d: the sandbox's ids (%s:%s)" % (n, uid, gid))
        check(int(capeff, 16) == 0 and int(capbnd, 16) == 0, "fork %d: no capabilities (%s, %s)" % (n, capeff, capbnd))
        check(nnp == "1" and sec == "2", "fork %d: no_new_privs %s, seccomp mode %s" % (n, nnp, sec))
        check(cwd == "/work", "fork %d: cwd %s" % (n, cwd))
        fds = o[9:-3]
        check(fds in (["['0',", "'1',", "'2',", "'3',", "'4']"], ["['0',", "'1',", "'2',", "'3',", "'4',", "'5']"]),
              "fork %d: descriptors %s" % (n, " ".join(fds)))
    if len(outputs) == 2 and all(len(o) >= 13 for o in outputs):
        a, b = outputs
        check(a[-3] != b[-3], "random differs between two forks (%s, %s)" % (a[-3], b[-3]))
        check(a[-2] != b[-2], "numpy's global generator differs (%s, %s)" % (a[-2], b[-2]))
        check(a[-1] != b[-1], "tempfile's names differ (%s, %s)" % (a[-1], b[-1]))


main()
