// The python loader of a warm sandbox (runtime "loader": "python"): run as
// `python3 <flags> -c <loader> /work/main.py` ahead of demand, it does the
// interpreter's start-up, says so on fd 4, blocks on fd 3 until a job's code
// is in place, then runs it as __main__ the way `python3 /work/main.py` would.
// Before it says so it imports the runtime's preload modules (build_warm_spec
// puts the import statement in place of __THROWBOX_PRELOAD__; `pass` for none):
// that runs before any job exists, so there is no job data to keep. After a
// preload it calls gc.freeze(): the preloaded objects are left out of every
// collection, so the exit does not walk them (240 ms of teardown with numpy,
// pandas and matplotlib loaded, 20-40 ms frozen).
// Go byte 'n': a job with a network profile; the loader's environment gains
// the proxy variables first (build_warm_spec puts sandbox::kProxyEnv in place
// of __THROWBOX_PROXY_ENV__), as a cold job's would have them from execve.
#pragma once

namespace broker {

// Frames of the loader are cut from tracebacks: a job's error reads as if it
// had been started cold. Its own names live in a function, so nothing of it is
// left in __main__. SystemExit passes through (exit codes are the program's).
inline constexpr const char* kPythonLoader = R"py(def _throwbox_loader():
    import os, sys
    __THROWBOX_PRELOAD__
    os.write(4, b'r')
    os.close(4)
    go = os.read(3, 1)
    os.close(3)
    if go not in (b'1', b'n'):
        os._exit(125)
    if go == b'n':
        os.environ.update(__THROWBOX_PROXY_ENV__)
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
    try:
        with open(path, 'rb') as f:
            code = compile(f.read(), path, 'exec')
        exec(code, main.__dict__)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == '<string>':
            tb = tb.tb_next
        e.__traceback__ = tb
        sys.excepthook(type(e), e, tb)
        sys.exit(1)
_throwbox_loader()
)py";

}  // namespace broker
