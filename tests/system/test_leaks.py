"""Memory and references given back: 1,000 tracers started, stopped,
read, cleared and dropped (while active too, in cycles too) leave the
process as they found it.  Each run is in a fresh interpreter, for a
clean RSS and so that a crash fails the test, not the run."""
import sys

import pytest

from support import PROC_STATUS, needs_plain_allocator, run_json

# A tracer runs here (in this process or a child): in every setup.
pytestmark = pytest.mark.usefixtures("clock")

TIMEOUT = 300  # against hangs only: the run takes about a second
# The expensive runs: once on each backend (the clock does not matter).
SETUPS = ["cycles"] + (["monitoring"] if sys.version_info >= (3, 12) else [])
each_backend = pytest.mark.parametrize("clock", SETUPS, indirect=True)


STATUS = PROC_STATUS


# ---- 1000 tracers started, stopped and dropped ---------------------------

THOUSAND_TRACERS = STATUS + """
    import gc, json, sys, threading, tracemalloc
    import frametrace
    from frametrace import _tracer
    from targets import calls

    def in_thread():
        calls.branch(3)

    def cycle(i):
        big = i % 100 == 0  # a full 8 MiB ring now and then
        t = frametrace.Tracer(buffer_size=frametrace.DEFAULT_BUFFER_SIZE if big else 1024)
        t.start()
        calls.program()
        if i % 50 == 7:  # a thread registered while tracing
            th = threading.Thread(target=in_thread)
            th.start()
            th.join()
        kind = i % 5
        if kind == 0:
            t.stop(); t.getEvents()
        elif kind == 1:
            t.stop(); ev = t.getEvents(); t.clear(); del ev
        elif kind == 2:
            t.stop()  # never read
        elif kind == 3:
            del t  # dropped while active
        else:
            holder = [t]; holder.append(holder)  # dropped while active, in a cycle
            del t, holder
            gc.collect()

    def hook_type():
        # Every hook object (and Event) holds a reference to its type: leaked
        # ones show.  (Not the names' strings: interned, shared, noisy.)
        with frametrace.Tracer(buffer_size=16, backend="setprofile"):
            return type(sys.getprofile())

    watched = {
        "program": calls.program, "program.__code__": calls.program.__code__,
        "leaf.__code__": calls.leaf.__code__, "branch.__code__": calls.branch.__code__,
        "Point.norm.__code__": calls.Point.norm.__code__,
        "in_thread.__code__": in_thread.__code__,
        "Tracer": frametrace.Tracer, "_tracer.Tracer": _tracer.Tracer,
        "_ThreadHook": hook_type(), "Event": frametrace.Event,
    }

    def measure():
        gc.collect()
        gc.collect()
        return dict(rss=status("VmRSS"), traced=tracemalloc.get_traced_memory()[0],
                    blocks=sys.getallocatedblocks(),
                    tracers=sum(isinstance(o, _tracer.Tracer) for o in gc.get_objects()),
                    refs={k: sys.getrefcount(v) for k, v in watched.items()})

    tracemalloc.start()
    for i in range(200):  # warm up: caches, free lists, arenas
        cycle(i)
    before = measure()
    for i in range(1000):
        cycle(i)
    after = measure()
    print(json.dumps(dict(before=before, after=after)))
"""


@each_backend
@needs_plain_allocator
def test_1000_tracers_give_back_memory_and_references():
    out = run_json(THOUSAND_TRACERS)
    b, a = out["before"], out["after"]
    assert a["refs"] == b["refs"]  # no slack for references
    assert a["tracers"] == b["tracers"] == 0
    # Slack for caches and free lists settling (measured: +1..15 kB, +16..270
    # blocks); a leak of one small ring (8 KiB) or of 64 bytes per tracer
    # would exceed it.
    assert a["traced"] - b["traced"] < 64 << 10, (b, a)
    assert a["blocks"] - b["blocks"] < 1000, (b, a)
    assert a["rss"] - b["rss"] < 2 << 20, (b, a)
    print(f"\n1000 tracers: RSS {a['rss'] - b['rss']:+d} B, tracemalloc "
          f"{a['traced'] - b['traced']:+d} B, blocks {a['blocks'] - b['blocks']:+d}")
