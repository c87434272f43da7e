"""How large a .pftrace is and how fast it is written: bytes per event and
write rate, on the fib workload and on a run of many threads.

    python benchmarks/export_perfetto.py [--fib N] [--threads T] [--reps N]

"fib": workloads.fib(N) in one thread (Python calls only).  "threads": T
threads started while traced, each calling workloads.methods() (method
calls and __init__ on small objects), run one after another.  "short
threads": --funcs functions called once each, then T threads making about
190 calls each (methods(25), and starting the thread).  Each trace is
written by write_perfetto() to .pftrace and .pftrace.gz, best of --reps
writes; .json.gz (write_chrome) for reference.

An event is a call's entry or its exit (two per call), as compare.py counts
them: bytes/event = file size / (2 x calls).  The write rate is in calls
(getEvents() Events) written per second, as export.py's, wall clock and by
the process's CPU time.  Only the public API is used: it measures whichever
frametrace is installed.  A report, never a test.

Then, for each .pftrace, what its sequence per thread costs against one
shared sequence (the other layout Perfetto allows): the threads' first
packets (a shared sequence would still re-anchor its clock per thread) and
the interned entries that repeat one of another thread (a shared sequence
interns each function once), against the track uuid every event packet
would carry there (1 + 1-3 bytes).  Where the last is larger than the other
two together, the sequence per thread is the smaller file.  (Files before
issue 18 intern everything in each thread's first packet.)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import frametrace  # noqa: E402
from frametrace.export import write_chrome, write_perfetto  # noqa: E402
from workloads import fib, methods  # noqa: E402


def record_fib(n):
    with frametrace.Tracer(buffer_size=1 << 24) as tracer:
        fib(n)
    return tracer


def record_threads(nthreads, per_thread):
    def work():
        methods(per_thread)

    with frametrace.Tracer(buffer_size=1 << 20) as tracer:
        for _ in range(nthreads):
            t = threading.Thread(target=work)
            t.start()
            t.join()
    return tracer


def varint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def varint_len(v):
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


def interned_entries(buf, p, end):
    """(key, size) of each entry of an InternedData: key its table and
    content without its iid, size its bytes in the file."""
    while p < end:
        start = p
        key, p = varint(buf, p)
        m, p = varint(buf, p)
        q, content = p, bytearray()
        while q < p + m:
            k0 = q
            k, q = varint(buf, q)
            if k & 7 == 0:
                _, q = varint(buf, q)
            else:
                n, q = varint(buf, q)
                q += n
            if k >> 3 != 1:  # not the iid
                content += buf[k0:q]
        p += m
        yield (key, bytes(content)), p - start


def layout_costs(path):
    """(bytes of the threads' first packets, bytes of interned entries that
    repeat one another sequence's, bytes the track uuids of a shared
    sequence would add), from the file; files before issue 18 (every
    sequence interning everything up front) count too."""
    with open(path, "rb") as fh:
        buf = fh.read()
    pos, firsts, repeats, uuids = 0, 0, 0, 0
    seen, entries = set(), set()
    first_thread_uuid = 16
    while pos < len(buf):
        _, pos = varint(buf, pos)          # TracePacket key
        n, pos = varint(buf, pos)
        head = varint_len(n) + 1
        end, p, seq, interned, event = pos + n, pos, None, None, False
        while p < end:
            key, p = varint(buf, p)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, p = varint(buf, p)
                if field == 10:
                    seq = value
            else:
                m, q = varint(buf, p)
                if field == 12:
                    interned = (q, q + m)
                elif field == 11:
                    event = True
                p = q + m
        if seq is not None and seq >= 2 and seq not in seen:
            seen.add(seq)
            firsts += head + n
            if interned:  # counted as the first packet's
                entries.update(k for k, _ in interned_entries(buf, *interned))
                interned = None
        if interned:
            for k, size in interned_entries(buf, *interned):
                if k in entries:
                    repeats += size
                entries.add(k)
        if seq is not None and seq >= 2 and event:
            uuids += 1 + varint_len(first_thread_uuid + seq - 2)
        pos = end
    return firsts, repeats, uuids


def record_short_threads(nthreads, nfuncs):
    """A large function table (nfuncs functions called once by the main
    thread), then nthreads threads that each make a few calls: what
    repeating the whole name table per thread cost most."""
    namespace = {}
    exec("\n".join(f"def f{i}():\n    return {i}" for i in range(nfuncs)), namespace)
    funcs = [namespace[f"f{i}"] for i in range(nfuncs)]

    def work():
        methods(25)

    with frametrace.Tracer(buffer_size=1 << 20) as tracer:
        for f in funcs:
            f()
        for _ in range(nthreads):
            t = threading.Thread(target=work)
            t.start()
            t.join()
    return tracer


def timed(writer, path, tracer, reps):
    dt = cpu = float("inf")
    for _ in range(reps):
        c0, t0 = time.process_time(), time.perf_counter()
        written = writer(tracer, path)
        dt = min(dt, time.perf_counter() - t0)
        cpu = min(cpu, time.process_time() - c0)
    return written, dt, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fib", type=int, default=27, help="fib(N): N=27 is about 0.6M calls")
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--per-thread", type=int, default=3000,
                        help="methods(N) per thread: 4 calls each")
    parser.add_argument("--funcs", type=int, default=2000,
                        help="functions the short threads' run calls first")
    parser.add_argument("--reps", type=int, default=3, help="writes of each kind (best kept)")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="frametrace-pftrace-")
    runs = [(f"fib({args.fib})", record_fib(args.fib)),
            (f"{args.threads} threads", record_threads(args.threads, args.per_thread)),
            (f"{args.threads} short threads, {args.funcs:,} functions",
             record_short_threads(args.threads, args.funcs))]
    print(f"frametrace {frametrace.__version__} from {os.path.dirname(frametrace.__file__)}, "
          f"CPython {sys.version.split()[0]}\n")
    print("| run | file | calls | threads | bytes | bytes/event | bytes/call | calls/s | calls/CPU-s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    layouts = []
    for label, tracer in runs:
        for suffix, writer in ((".pftrace", write_perfetto), (".pftrace.gz", write_perfetto),
                               (".json.gz", write_chrome)):
            path = os.path.join(tmp, "t" + suffix)
            calls, dt, cpu = timed(writer, path, tracer, args.reps)
            size = os.path.getsize(path)
            print(f"| {label} | {suffix} | {calls:,} | {len(tracer.threads)} | {size:,} | "
                  f"{size / (2 * calls):.2f} | {size / calls:.2f} | {calls / dt:,.0f} | "
                  f"{calls / cpu:,.0f} |")
        firsts, repeats, uuids = layout_costs(os.path.join(tmp, "t.pftrace"))
        layouts.append(f"| {label} | {firsts:,} | {repeats:,} | {uuids:,} |")
        tracer.clear()
    print("\n| run | threads' first packets, bytes | interned again on another thread, bytes | "
          "track uuids on one shared sequence, bytes |")
    print("|---|---:|---:|---:|")
    print("\n".join(layouts))


if __name__ == "__main__":
    main()
