"""A ring larger than the part faulted in at a thread's first event is
faulted in by a background thread, so the traced thread itself takes no
page fault; that thread is stopped when the ring goes, also half-way, and
a forked child (where it does not exist) can drop the ring.  Each run is in
a fresh interpreter, for a clean RSS and page-fault count."""
import sys
import textwrap

import pytest

from support import PROC_STATUS, needs_plain_allocator, run_json

pytestmark = [
    needs_plain_allocator,
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="RUSAGE_THREAD and MADV_POPULATE_WRITE are Linux's"),
    pytest.mark.usefixtures("clock"),  # a tracer runs in the child: in every setup
]

def run(program, **kwargs):
    return run_json(textwrap.dedent(PROC_STATUS) + textwrap.dedent(program), **kwargs)


WORD = 8  # bytes of a ring record
RING = 1 << 24  # records: 128 MiB, 112 MiB of it past the part faulted in at once


def test_the_traced_thread_takes_no_page_fault_in_a_large_ring():
    result = run(f"""
        import json, resource, time
        import frametrace

        def leaf():
            pass

        def loop(n):
            for _ in range(n):
                leaf()

        loop(1000)
        rss_before = status("VmRSS")
        t = frametrace.Tracer(buffer_size={RING})
        t.start()
        leaf()  # the thread's ring now exists
        # The background thread is far faster than any writer, but a busy
        # machine may not run it at once: wait until the ring is resident.
        deadline = time.monotonic() + 60
        while status("VmRSS") - rss_before < {RING * WORD} * 0.95:
            assert time.monotonic() < deadline, "the ring was never faulted in"
            time.sleep(0.01)
        faults_before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        loop(6_000_000)  # 12M events: 96 MiB of records
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - faults_before
        t.stop()
        print(json.dumps(dict(faults=faults, dropped=t.dropped)))
    """)
    # Faulting the ring on the hot path would be one fault per page written
    # past the first 16 MiB: ~20,000 (or ~40 huge pages where granted).
    assert result["faults"] <= 4, result
    assert result["dropped"] == 0


@pytest.mark.parametrize("end", ["clear", "drop", "drop_active"])
def test_a_ring_freed_while_it_is_faulted_in_is_given_back(end):
    result = run(f"""
        import gc, json
        import frametrace

        def leaf():
            pass

        rss_before = status("VmRSS")
        for i in range(20):
            # 2 GiB rings: freed long before the background thread is done.
            t = frametrace.Tracer(buffer_size=frametrace.MAX_BUFFER_SIZE)
            t.start()
            leaf()
            if {end!r} == "clear":
                t.stop()
                t.getEvents()
                t.clear()
            elif {end!r} == "drop":
                t.stop()
            del t
            gc.collect()
        print(json.dumps(dict(grown=status("VmRSS") - rss_before)))
    """)
    # Each ring is 2 GiB: any one of them left behind would show.
    assert result["grown"] < 64 << 20, result


def test_a_forked_child_drops_a_ring_still_being_faulted_in():
    result = run("""
        import json, os, warnings
        import frametrace

        # 3.12+ warns of fork() in a process with threads: the background
        # thread is one.
        warnings.filterwarnings("ignore", "This process", DeprecationWarning)

        def leaf():
            pass

        t = frametrace.Tracer(buffer_size=frametrace.MAX_BUFFER_SIZE)
        t.start()
        leaf()
        pid = os.fork()  # the background thread is not copied
        if pid == 0:
            try:
                t.stop()
                events = [e.name for e in t.getEvents()]
                t.clear()
                del t
                code = 0 if events.count("leaf") == 1 else 3
            except BaseException:
                code = 4
            os._exit(code)
        _, status_code = os.waitpid(pid, 0)
        t.stop()
        names = [e.name for e in t.getEvents()]
        t.clear()
        print(json.dumps(dict(child=os.waitstatus_to_exitcode(status_code),
                              leaf=names.count("leaf"))))
    """, timeout=120)
    assert result == {"child": 0, "leaf": 1}
