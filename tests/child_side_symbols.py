#!/usr/bin/python3
"""The sandbox's child side never allocates, locks or logs.

pid 1 and the program child run on the zygote's memory (CLONE_VM, and without
CLONE_SETTLS on its thread data too) while the zygote may still allocate, so
one malloc there can corrupt the heap both use. This reads the undefined
symbols that code reachable from the child-side objects' entry points refers
to (readelf: symbols, sections, relocations; the objects are built with
-ffunction-sections, so reachability is per function) and fails on:
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
Usage: child_side_symbols.py [--expect SYM,SYM...] OBJECT...
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


def readelf(args, obj):
    return subprocess.run(["readelf", "-W"] + args + [obj], check=True, capture_output=True, text=True).stdout


class Object:
    """One object file: its sections, symbols and relocations (readelf)."""

    def __init__(self, path):
        self.path = path
        self.section_names = {}   # index -> name
        self.rela_target = {}     # relocation section name -> index of the section it applies to
        for line in readelf(["-S"], path).splitlines():
            m = re.match(r"\s*\[\s*(\d+)\]\s+(\S+)\s+(\S+)\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S*)\s+(\d+)\s+(\d+)\s+\d+$",
                         line)
            if not m:
                continue
            idx, name, kind, info = int(m.group(1)), m.group(2), m.group(3), int(m.group(6))
            self.section_names[idx] = name
            if kind in ("RELA", "REL"):
                self.rela_target[name] = info
        self.defined = {}         # symbol -> section index (functions and data defined here)
        self.globals = set()      # of those, the non-local ones (callable from elsewhere)
        self.strong = set()       # of those, GLOBAL (not WEAK): the entry points
        self.undefined = set()
        for line in readelf(["-s"], path).splitlines():
            f = line.split()
            if len(f) < 8 or not f[0].endswith(":") or f[3] in ("FILE", "SECTION"):
                continue
            name, ndx, bind = f[7].split("@")[0], f[6], f[4]
            if ndx == "UND":
                if name:
                    self.undefined.add(name)
            elif ndx.isdigit():
                self.defined[name] = int(ndx)
                if bind != "LOCAL":
                    self.globals.add(name)
                if bind == "GLOBAL":
                    self.strong.add(name)
        self.refs = {}            # section index -> names its relocations refer to
        current = None
        for line in readelf(["-r"], path).splitlines():
            m = re.match(r"Relocation section '(\S+)'", line)
            if m:
                current = self.rela_target.get(m.group(1))
                continue
            f = line.split()
            if current is None or len(f) < 5 or not re.match(r"[0-9a-f]{8,}$", f[0]):
                continue
            self.refs.setdefault(current, set()).add(f[4])


# Sections that only describe code (unwind tables, debug info) or are never
# run: following them would reach every function.
NOT_CODE = re.compile(r"\.(eh_frame|debug_|note|comment|group|gcc_except_table|stack)")


def reachable_references(objects):
    """Undefined symbols referenced from code reachable from the objects'
    entry points (their GLOBAL symbols), each with the object referring to it.
    Template instantiations and inline functions a header put in an object
    (WEAK) count only if something reachable calls them: an unoptimised build
    emits many that nothing in the child calls."""
    owner = {}
    for o in objects:
        for name in o.globals:
            owner.setdefault(name, (o, o.defined[name]))
    work = [(o, o.defined[name]) for o in objects for name in o.strong]
    work += [(o, i) for o in objects for i, n in o.section_names.items() if n.startswith((".init_array", ".ctors"))]
    seen, found = set(), {}
    while work:
        o, idx = work.pop()
        if (o.path, idx) in seen or NOT_CODE.match(o.section_names.get(idx, "")):
            continue
        seen.add((o.path, idx))
        for ref in o.refs.get(idx, ()):
            if ref in o.defined:                      # this object's own function or data
                work.append((o, o.defined[ref]))
            elif ref in o.section_names.values():     # a section symbol (.rodata, .text.<fn>)
                work += [(o, i) for i, n in o.section_names.items() if n == ref]
            elif ref in owner:                        # another child-side object's
                work.append(owner[ref])
            else:
                found.setdefault(ref, set()).add(o.path)
    return found


def demangle(name):
    try:
        return subprocess.run(["c++filt", name], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--expect", default="", help="comma-separated symbols that must be reported (self-test)")
    ap.add_argument("objects", nargs="+")
    args = ap.parse_args()
    objects = [Object(o) for arg in args.objects for o in arg.split(";") if o]
    reported = {}
    for sym, paths in reachable_references(objects).items():
        kind = next((k for k, p in PATTERNS if p.match(sym)), None)
        if kind is None and sym.startswith("_Z"):
            kind = "C++ code outside the child side"
        if kind:
            reported[sym] = [(path, kind) for path in sorted(paths)]
    for sym, where in sorted(reported.items()):
        for obj, kind in where:
            print("%s: %s: %s (%s)" % (obj, kind, demangle(sym), sym))
    if args.expect:
        missing = [s for s in args.expect.split(",") if s not in reported]
        for s in missing:
            print("expected a report of %s, got none" % s)
        return 1 if missing else 0
    if reported:
        print("child-side code must not allocate, lock or log (it runs on the zygote's memory): %d symbol(s)" % len(reported))
        return 1
    print("%d child-side objects: no allocator, lock, logging or foreign C++ symbol" % len(objects))
    return 0


if __name__ == "__main__":
    sys.exit(main())
