# The code-context driver: a Python interpreter that runs cells sent on
# stdin and answers each with one framed JSON result on stdout.
#
# Protocol (crates/session/src/context.rs is the other side):
#   stdin, first: this driver itself, read and run by boot.py.
#   stdin, then one line: a random hex boundary, unique to this interpreter.
#   stdin, then: one JSON object per line, {"code": "..."}.
#   stdout and stderr carry the cell's own output as it is written (print,
#   os.write(1, ...), subprocesses: all of it, in order). When a cell is
#   done the driver writes MARK b"0\n" on stderr, then MARK LEN b"\n" JSON
#   on stdout, where MARK is b"\x1e@cordon-" BOUNDARY b"@". The first frame
#   (before any cell) says the interpreter is ready.
#
# The frames go out through private duplicates of fds 1 and 2, so a cell
# that closes or redirects fd 1 does not cut the channel; the boundary comes
# over stdin (never argv or the environment) and lives only in this
# function's locals, so output cannot forge a frame by accident. fd 0 is
# /dev/null for the cell: it cannot read the next cell.


def _cordon_driver():
    import ast
    import builtins
    import json
    import linecache
    import os
    import sys
    import traceback
    import types

    value_limit = 1 << 20

    proto_in = os.dup(0)
    try:
        null = os.open("/dev/null", os.O_RDONLY)
    except OSError:
        null, w = os.pipe()
        os.close(w)
    os.dup2(null, 0)
    os.close(null)
    out_fd = os.dup(1)
    err_fd = os.dup(2)
    requests = os.fdopen(proto_in, "rb")

    boundary = requests.readline().strip()
    if len(boundary) < 16:
        os._exit(3)
    mark = b"\x1e@cordon-" + boundary + b"@"

    def write_all(fd, data):
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def flush_std():
        for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                s.flush()
            except Exception:
                pass

    def send(result):
        flush_std()
        payload = json.dumps(result, ensure_ascii=False).encode("utf-8", "replace")
        write_all(err_fd, mark + b"0\n")
        write_all(out_fd, mark + str(len(payload)).encode() + b"\n" + payload)

    def user_traceback(tb):
        # Drop the driver's own frames ("<cordon-driver>", boot.py's "<string>").
        while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
            tb = tb.tb_next
        return tb

    def describe(e):
        try:
            message = str(e)
        except Exception:
            message = "<unprintable>"
        lines = traceback.format_exception(type(e), e, user_traceback(e.__traceback__))
        return {"name": type(e).__name__, "message": message, "traceback": "".join(lines)}

    def short_repr(v):
        r = repr(v)
        if len(r) > value_limit:
            r = r[:value_limit] + "... [%d characters cut]" % (len(r) - value_limit)
        return r

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    ns = main.__dict__
    sys.argv = [""]
    top_level_await = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
    loop = []

    def run(code_obj):
        r = eval(code_obj, ns)
        if code_obj.co_flags & 0x80:  # CO_COROUTINE: the cell awaited at top level
            import asyncio

            if not loop:
                loop.append(asyncio.new_event_loop())
            r = loop[0].run_until_complete(r)
        return r

    def run_cell(code, n):
        name = "<cell-%d>" % n
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        try:
            tree = ast.parse(code, name, "exec")
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr):
                last = ast.Expression(tree.body.pop().value)
            if tree.body:
                run(compile(tree, name, "exec", flags=top_level_await))
            if last is not None:
                v = run(compile(last, name, "eval", flags=top_level_await))
                if v is not None:
                    ns["_"] = v
                    return {"value": short_repr(v), "error": None}
            return {"value": None, "error": None}
        except BaseException as e:  # SystemExit and KeyboardInterrupt too: the interpreter lives on
            return {"value": None, "error": describe(e)}

    pid = os.getpid()
    send({"ready": True, "python": sys.version.split()[0]})
    n = 0
    while True:
        line = requests.readline()
        if not line.endswith(b"\n"):
            break  # stdin closed (or cut mid-request): the context is gone
        n += 1
        try:
            code = json.loads(line)["code"]
        except Exception as e:
            send({"value": None, "error": describe(e)})
            continue
        result = run_cell(code, n)
        if os.getpid() != pid:
            os._exit(0)  # a child forked by the cell must not answer for it
        send(result)


_cordon_driver()
