#!/usr/bin/python3
"""The sandbox's child side never allocates, locks or logs (STYLE.md, Errors).

pid 1 and the program child run on the zygote's memory (CLONE_VM, and without
CLONE_SETTLS on its thread data too) while the zygote may still allocate, so
one malloc there can corrupt the heap both use. This reads the undefined
symbols of every child-side object (`nm -u`) and fails on:
  - an allocator: malloc and friends, operator new/delete, strdup, asprintf,
    opendir (allocates its DIR), libstdc++'s __throw_* helpers;
  - exceptions and unwinding: __cxa_throw, __cxa_allocate_exception,
    _Unwind_Resume and __gxx_personality_v0 (a destructor run on unwinding
    means an object that owns something, e.g. a std::string temporary);
  - a lock: pthread mutexes, rwlocks, condition variables, once, semaphores,
    __cxa_guard_* (a function-local static's initialisation), std::mutex;
  - logging and stdio: spdlog, iostreams, the printf family (snprintf too:
    glibc's vfprintf may allocate), puts/fwrite/fopen/perror, syslog, strerror
    (not async-signal-safe). The child reports through fail_in_child instead;
  - any C++ symbol (mangled `_Z...`) not defined in one of the objects checked:
    child-side code calls only child-side code, so what it reaches is checked too.
Usage: child_side_symbols.py [--nm NM] [--expect SYM,SYM...] OBJECT...
(OBJECT may be a ;-separated list, as $<TARGET_OBJECTS:...> gives it.)
Exit 0: clean. 1: a forbidden symbol (each printed with its object).
--expect turns it into the check's own test: exit 0 only if every listed
symbol was reported, 1 otherwise.
"""
import argparse
import re
import subprocess
import sys

FORBIDDEN = [
    ("allocator", r"(malloc|calloc|realloc|reallocarray|free|aligned_alloc|posix_memalign|memalign|valloc|pvalloc"
                  r"|strdup|strndup|asprintf|vasprintf|opendir|fdopendir|scandir|getline|getdelim|open_memstream"
                  r"|realpath|__libc_malloc|__libc_free)"),
    ("allocator", r"_Zn[wa][jm].*|_Zd[la]Pv.*"),            # operator new / new[] / delete / delete[]
    ("exception", r"__cxa_(allocate_exception|throw|rethrow|begin_catch|end_catch)|_Unwind_Resume|__gxx_personality_v0"),
    ("exception", r"_ZSt\d+__throw_.*"),                     # std::__throw_length_error & co.
    ("lock", r"pthread_(mutex|rwlock|cond|spin|once|barrier)_.*|pthread_once|sem_(wait|timedwait|post)"
             r"|__cxa_guard_(acquire|release|abort)|flockfile|funlockfile|_ZNSt5mutex.*|_ZSt9call_once.*"
             r"|__gthr.*"),
    ("logging", r".*spdlog.*|_ZSt(4cout|4cerr|4clog).*|_ZNSo.*|_ZStlsI.*"),
    ("stdio", r"(__)?(v?f?printf|v?s?n?printf|v?dprintf)(_chk)?|puts|fputs|fputc|putc|putchar|fwrite|fopen|fdopen"
              r"|fclose|fflush|perror|syslog|vsyslog|strerror|strerror_r|__xpg_strerror_r|setlocale|stdout|stderr"),
    ("atexit", r"atexit|__cxa_atexit"),
]
PATTERNS = [(kind, re.compile("(?:%s)$" % p)) for kind, p in FORBIDDEN]


def symbols(nm, obj, undefined):
    args = [nm, "-u", obj] if undefined else [nm, "--defined-only", obj]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if parts:
            names.add(parts[-1].split("@")[0])
    return names


def demangle(name):
    try:
        return subprocess.run(["c++filt", name], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--expect", default="", help="comma-separated symbols that must be reported (self-test)")
    ap.add_argument("objects", nargs="+")
    args = ap.parse_args()
    objects = [o for arg in args.objects for o in arg.split(";") if o]
    defined = set()
    for obj in objects:
        defined |= symbols(args.nm, obj, undefined=False)
    reported = {}
    for obj in objects:
        for sym in sorted(symbols(args.nm, obj, undefined=True)):
            kind = next((k for k, p in PATTERNS if p.match(sym)), None)
            if kind is None and sym.startswith("_Z") and sym not in defined:
                kind = "C++ code outside the child side"
            if kind:
                reported.setdefault(sym, []).append((obj, kind))
    for sym, where in sorted(reported.items()):
        for obj, kind in where:
            print("%s: %s: %s (%s)" % (obj, kind, demangle(sym), sym))
    if args.expect:
        missing = [s for s in args.expect.split(",") if s not in reported]
        for s in missing:
            print("expected a report of %s, got none" % s)
        return 1 if missing else 0
    if reported:
        print("child-side code must not allocate, lock or log (STYLE.md, Errors): %d symbol(s)" % len(reported))
        return 1
    print("%d child-side objects: no allocator, lock, logging or foreign C++ symbol" % len(objects))
    return 0


if __name__ == "__main__":
    sys.exit(main())
