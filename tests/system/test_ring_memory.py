"""A ring costs what its thread records: it starts at one page and grows,
faulted in ahead from the slow path, so that the traced thread takes no page
fault; an ended thread's ring gives back what holds no record; a program
that starts thousands of short threads stays within a few MB per thousand.
Each run is in a fresh interpreter, for a clean RSS and page-fault count."""
import sys
import textwrap

import pytest

from support import PROC_STATUS, needs_plain_allocator, run_json

pytestmark = [
    needs_plain_allocator,
    pytest.mark.skipif(not sys.platform.startswith("linux"),
                       reason="RUSAGE_THREAD, /proc and MADV_POPULATE_WRITE are Linux's"),
    pytest.mark.usefixtures("clock"),  # a tracer runs in the child: in every setup
]

def run(program, **kwargs):
    return run_json(textwrap.dedent(PROC_STATUS) + textwrap.dedent(program), **kwargs)


# The child programs' workload: loop(n) makes n calls, 2n records.
LOOP = """
        import json
        import frametrace

        def leaf():
            pass

        def loop(n):
            for _ in range(n):
                leaf()
"""  # indented as the programs it goes before, for run()'s dedent


WORD = 8  # bytes of a ring record
RING = 1 << 24  # records: 128 MiB


def test_a_ring_grows_as_it_fills_and_is_resident_ahead_of_its_writer():
    result = run(LOOP + f"""
        loop(1000)
        rss_before = status("VmRSS")
        t = frametrace.Tracer(buffer_size={RING})
        t.start()
        start_bytes = t.ring_bytes
        loop(65_600)  # 131,200 records: just past the ring's first MiB
        ahead, ahead_rss = t.ring_bytes, status("VmRSS") - rss_before
        loop(6_000_000)  # 12M more records: 92 MiB
        t.stop()
        print(json.dumps(dict(start_bytes=start_bytes, ahead=ahead, ahead_rss=ahead_rss,
                              dropped=t.stats.dropped, ring_bytes=t.ring_bytes)))
    """)
    assert result["dropped"] == 0
    # One page at start(), not the 128 MiB the ring may grow to.
    assert result["start_bytes"] == 4096, result
    # Just past 1 MiB written, the ring has grown to 2 MiB, faulted in
    # ahead of the writer (resident, not left to page faults as written).
    assert result["ahead"] == 2 << 20, result
    assert result["ahead_rss"] >= result["ahead"] - (128 << 10), result
    # It grew to what was recorded (92.6 MiB), not to its capacity (128 MiB).
    assert 92 << 20 <= result["ring_bytes"] <= 95 << 20, result


def test_the_hot_path_takes_no_page_fault_growing_or_wrapping():
    """Growth faults its pages in from the slow path, ahead of the writer:
    the records written into what a growth committed take no fault (written
    as they come, they would take one a page), nor do those of a ring that
    wraps at its full size."""
    result = run(LOOP + f"""
        import resource

        def faults():
            return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt

        loop(100_000)
        t = frametrace.Tracer(buffer_size=1 << 21)  # 16 MiB
        t.start()
        loop(65_600)  # 131,200 records: just past 1 MiB, grown to 2 MiB
        committed = t.ring_bytes
        before = faults()
        loop(50_000)  # 100,000 records, 0.8 MiB: 195 pages, all committed
        ahead = faults() - before
        loop(4_000_000)  # grown to 16 MiB, wrapping
        full = t.ring_bytes
        before = faults()
        loop(2_000_000)  # 4M records, all wrapping
        wrapping = faults() - before
        t.stop()
        print(json.dumps(dict(committed=committed, ahead=ahead, full=full,
                              wrapping=wrapping)))
    """)
    assert result["committed"] == 2 << 20, result
    assert result["full"] == 16 << 20, result
    assert result["ahead"] <= 8, result
    assert result["wrapping"] <= 8, result


THREADS = 3000


def test_thread_churn_costs_what_the_threads_record():
    # 3,000 threads of 12 calls each, one after the other: each one's ring
    # is a page; an ended thread's gives back its reserve.
    program = f"""
        import json, threading
        import frametrace

        def leaf(i):
            return i

        def body():
            for i in range(12):
                leaf(i)

        def churn(n):
            for _ in range(n):
                t = threading.Thread(target=body)
                t.start()
                t.join()

        churn(20)
        rss_before, vm_before = status("VmRSS"), status("VmSize")
        t = frametrace.Tracer() if TRACED else None
        if t is not None:
            t.start()
        churn({THREADS})
        out = dict(rss=status("VmRSS") - rss_before, vm=status("VmSize") - vm_before)
        if t is not None:
            t.stop()
            out.update(ring_bytes=t.ring_bytes, dropped=t.stats.dropped,
                       threads=len(t.threads),
                       leaves=sum(e.name == "leaf" for e in t.getEvents()))
        print(json.dumps(out))
    """
    untraced = run("TRACED = False\n" + textwrap.dedent(program))
    traced = run("TRACED = True\n" + textwrap.dedent(program))
    assert traced["dropped"] == 0 and traced["leaves"] == 12 * THREADS, traced
    assert traced["threads"] == THREADS + 1
    # The bound: 60 MB above untraced (a full 8 MiB ring each: 24 GB).
    assert traced["rss"] - untraced["rss"] <= 60_000_000, (traced, untraced)
    # The rings hold a page or two each (threading's own calls, C calls
    # included, are most of the records); the ended threads' reserves (8 MiB
    # of address space each) were given back while tracing.
    assert traced["ring_bytes"] <= (THREADS + 1) * 2 * 4096, traced
    assert traced["vm"] - untraced["vm"] < 1 << 30, (traced, untraced)


def test_an_ended_threads_ring_gives_back_its_unused_part():
    result = run("""
        import json, threading
        import frametrace

        def leaf(i):
            return i

        def body():
            for i in range(66_000):  # 132,000 records: 1.01 MiB, in a ring grown to 2 MiB
                leaf(i)

        t = frametrace.Tracer(c_calls=False)
        t.start()
        th = threading.Thread(target=body)
        th.start()
        th.join()
        grown = t.ring_bytes
        t.stop()
        print(json.dumps(dict(grown=grown, after=t.ring_bytes, dropped=t.stats.dropped)))
    """)
    assert result["dropped"] == 0
    assert result["grown"] >= 2 << 20, result  # doubled past its first MiB
    # At stop the ended thread's ring keeps only the pages of its records
    # (and the main thread's ring a page or two).
    assert result["after"] <= (1 << 20) + (32 << 10), result


@pytest.mark.parametrize("end", ["clear", "drop", "drop_active"])
def test_a_large_reserved_ring_is_given_back(end):
    result = run(f"""
        import gc, json
        import frametrace

        def leaf():
            pass

        rss_before = status("VmRSS")
        for i in range(20):
            # 2 GiB of address space each, a page of it committed.
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


def test_a_forked_child_drops_an_inherited_reserved_ring():
    result = run("""
        import json, os, warnings
        import frametrace

        warnings.filterwarnings("ignore", "This process", DeprecationWarning)

        def leaf():
            pass

        t = frametrace.Tracer(buffer_size=frametrace.MAX_BUFFER_SIZE)
        t.start()
        leaf()
        pid = os.fork()
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
