"""The scripts that sys.remote_exec has the target run.  They call into
the target's own frametrace by name (``frametrace.remote._begin`` and
``frametrace.remote._serve_dump``): a contract with whatever version is
installed there."""
from __future__ import annotations


# The script the target runs: only the standard library until frametrace is
# imported, every failure kept from the target (CPython would print it).
_SCRIPT = '''\
# Written by frametrace attach for process {pid}: it traces this process for
# the attacher (PEP 768 sys.remote_exec) and then removes itself.
def _frametrace_attach(config):
    import os, sys, time, json, socket

    def give_up():
        # The attacher is gone: remove the script, do nothing.
        for remove, path in ((os.unlink, config["script"]), (os.rmdir, config["workdir"])):
            try:
                remove(path)
            except OSError:
                pass

    if time.time() > config["deadline"]:
        give_up()
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(config["handshake_timeout"])
        try:
            sock.connect(config["socket"])
        except OSError:
            give_up()
            raise
        hello = {{"pid": os.getpid(), "python": "%d.%d.%d" % sys.version_info[:3],
                 "executable": sys.executable, "prefix": sys.prefix}}
        busy = [name for name, module in list(sys.modules.items())
                if name.split(".")[0] == "frametrace"
                and getattr(getattr(module, "__spec__", None), "_initializing", False)]
        try:
            if busy:
                # The script runs between two bytecodes of the target: here,
                # in the middle of its own import of frametrace.
                raise ImportError("it is importing %s right now: attach again" % busy[0])
            import importlib
            agent = importlib.import_module("frametrace.remote")
        except BaseException as exc:
            hello.update(error="import", message="%s: %s" % (type(exc).__name__, exc))
            sock.send(json.dumps({{"hello": hello}}).encode() + b"\\n", socket.MSG_NOSIGNAL)
            sock.close()
            return
    except BaseException:
        sock.close()
        return
    frame = sys._getframe()
    try:
        agent._begin(sock, config, hello, (frame.f_code, frame.f_back.f_code))
    except BaseException:
        sock.close()


try:
    _frametrace_attach({config!r})
except BaseException:
    pass
'''


def attach_script(pid: int, config: dict) -> str:
    return _SCRIPT.format(pid=pid, config=config)


# The request of attach --dump.  It runs in the target's main thread, which
# its flight recorder traces: it imports nothing new and only hands the
# request over (frametrace.remote._serve_dump), so that the dump shows it
# as a few short calls at most.
_DUMP_SCRIPT = '''\
# Written by frametrace attach --dump for process {pid}: it asks the flight
# recorders running here to dump (PEP 768 sys.remote_exec).
def _frametrace_dump(config):
    import os, sys, time, socket

    if time.time() > config["deadline"]:
        # The attacher gave up (and may have sent the recorder's signal):
        # remove the script, do nothing.
        for remove, path in ((os.unlink, config["script"]), (os.rmdir, config["workdir"])):
            try:
                remove(path)
            except OSError:
                pass
        return
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(config["handshake_timeout"])
        sock.connect(config["socket"])
        remote = sys.modules.get("frametrace.remote")
        serve = getattr(remote, "_serve_dump", None)
        if serve is None:
            # No frametrace here (so no recorder), or an older one.
            import json
            spec = getattr(remote, "__spec__", None)
            hello = {{"pid": os.getpid(), "recorders": 0,
                     "frametrace": getattr(sys.modules.get("frametrace"), "__version__", None),
                     "importing": getattr(spec, "_initializing", False),
                     "old": remote is not None}}
            sock.send(json.dumps({{"hello": hello}}).encode() + b"\\n", socket.MSG_NOSIGNAL)
            sock.close()
            return
        serve(sock, config)
    except BaseException:
        sock.close()


try:
    _frametrace_dump({config!r})
except BaseException:
    pass
'''


def dump_script(pid: int, config: dict) -> str:
    return _DUMP_SCRIPT.format(pid=pid, config=config)
