// The python loader of a warm sandbox (runtime "loader": "python"): run as
// `python3 <flags> -c <loader> /work/main.py` ahead of demand, it does the
// interpreter's start-up, says so on fd 4, blocks on fd 3 until a job's code
// is in place, then runs it as __main__ the way `python3 /work/main.py` would.
// Before it says so it imports the runtime's preload modules (build_warm_spec
// puts the import statement in place of __THROWBOX_PRELOAD__) and calls
// gc.freeze(): what was loaded before any job existed (so there is no job data
// in it) is left out of every collection and of the exit's search for files.
// The exit does for the job's objects what the interpreter's does, then
// os._exit: the teardown of the preloaded stack is left out (240 ms of exit
// with numpy, pandas and matplotlib loaded, 20-40 ms frozen, about 2 ms of a
// bare interpreter's).
// Go byte 'n': a job with a network profile; the loader's environment gains
// the proxy variables first (build_warm_spec puts sandbox::kProxyEnv in place
// of __THROWBOX_PROXY_ENV__), as a cold job's would have them from execve;
// 'c': its profile intercepts a host, and sandbox::kCaBundleEnv
// (__THROWBOX_CA_ENV__) too.
#pragma once

namespace broker {

// The first compile() of an interpreter makes the types of every AST node
// (1.1 ms of a job's print(1) in a warm sandbox): the loader makes them
// before it says it is ready, and before the preload's freeze.
// Frames of the loader are cut from tracebacks: a job's error reads as if it
// had been started cold. Its own names live in a function, so nothing of it is
// left in __main__. SystemExit's code becomes the exit status as the
// interpreter reads it.
inline constexpr const char* kPythonLoader = R"py(def _throwbox_loader():
    import os, sys
    compile('', '<loader>', 'exec')
    __THROWBOX_PRELOAD__
    os.write(4, b'r')
    os.close(4)
    go = os.read(3, 1)
    os.close(3)
    if go not in (b'1', b'n', b'c'):
        os._exit(125)
    if go in (b'n', b'c'):
        os.environ.update(__THROWBOX_PROXY_ENV__)
    if go == b'c':
        os.environ.update(__THROWBOX_CA_ENV__)
    path = sys.argv[1]
    # The job's __main__ is a module made after the preload (and its freeze):
    # its globals and their cycles are the job's own, collected and torn down
    # at exit as a cold run's. The loader's module keeps only __builtins__
    # (imports made from the loader's frame, the traceback's source lines
    # among them, look it up there).
    loader_main = sys.modules['__main__']
    builtins = loader_main.__dict__['__builtins__']
    loader_main.__dict__.clear()
    loader_main.__dict__['__builtins__'] = builtins
    main = type(sys)('__main__')
    main.__dict__.update(__annotations__={}, __builtins__=builtins, __file__=path, __cached__=None)
    sys.modules['__main__'] = main
    sys.argv[:] = [path]
    before = set(sys.modules)
    status = 0
    try:
        with open(path, 'rb') as f:
            code = compile(f.read(), path, 'exec')
        exec(code, main.__dict__)
    except SystemExit as e:
        # As the interpreter reads it: None 0, an int its low byte, else printed and 1.
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xff
        else:
            try:
                sys.stderr.write(str(e.code) + '\n')
            except BaseException:
                pass
            status = 1
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == '<string>':
            tb = tb.tb_next
        e.__traceback__ = tb
        sys.excepthook(type(e), e, tb)
        tb = None  # its frames hold the job's objects
        status = 1
    # The interpreter's exit, for what the job made: its threads joined, its
    # atexit handlers run, the standard streams flushed, its globals and the
    # modules it imported cleared as the interpreter clears them, every file
    # object it left open flushed (text ones first: a collection may finalize
    # a cycle's buffered writer before its text wrapper, and the text is lost,
    # CPython bpo-17852), its cycles collected (finalizers run, with every
    # module still there), the streams flushed again and the files still open
    # closed; then os._exit, which leaves out the teardown of what was loaded
    # before the claim (240 ms of exit with the data stack, about 2 ms of a
    # bare interpreter's).
    code = f = None
    try:
        if 'threading' in sys.modules:
            sys.modules['threading']._shutdown()
    except BaseException:
        pass
    import atexit, gc, io
    atexit._run_exitfuncs()
    def flush_std():
        ok = True
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except BaseException:
                ok = False
        return ok
    if not flush_std() and status == 0:
        status = 120
    def clear(d):
        for k in [k for k in d if k.startswith('_') and k != '__builtins__']:
            d[k] = None
        for k in [k for k in d if k != '__builtins__']:
            d[k] = None
    try:
        clear(main.__dict__)
        for name in reversed([m for m in list(sys.modules) if m not in before]):
            module = sys.modules.get(name)
            if module is not None and hasattr(module, '__dict__'):
                clear(module.__dict__)
        module = None
    except BaseException:
        pass
    std = set()
    for stream in (sys.stdout, sys.stderr, sys.stdin, sys.__stdout__, sys.__stderr__, sys.__stdin__):
        buffer = getattr(stream, 'buffer', None)
        std.update((id(stream), id(buffer), id(getattr(buffer, 'raw', None))))
    def files():
        return [o for o in gc.get_objects() if isinstance(o, io.IOBase) and id(o) not in std]
    def each(objects, kinds, act):
        for kind in kinds:
            for o in objects:
                try:
                    if isinstance(o, kind) and not o.closed:
                        act(o)
                except BaseException:
                    pass
    each(files(), (io.TextIOBase, io.BufferedIOBase), lambda o: o.flush())
    gc.collect()
    if not flush_std() and status == 0:
        status = 120
    each(files(), (io.TextIOBase, io.BufferedIOBase, io.IOBase), lambda o: o.close())
    os._exit(status)
_throwbox_loader()
)py";

}  // namespace broker
