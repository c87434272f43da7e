"""The benchmarks' workloads, and counting the profile events they make.

Shared by overhead.py (its own sizes) and compare.py (the sizes in
WORKLOADS).  Pure Python, standard library only: importing this module
imports no tracer.
"""
from __future__ import annotations

import itertools
import json
import math
import re
import sys
import threading
from typing import Callable, NamedTuple

# ---- the workloads -----------------------------------------------------------


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


class Vec:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x = x
        self.y = y

    def add(self, other):
        return Vec(self.x + other.x, self.y + other.y)

    def scale(self, k):
        return Vec(self.x * k, self.y * k)

    def dot(self, other):
        return self.x * other.x + self.y * other.y


def methods(n):
    v, w, total = Vec(1.0, 2.0), Vec(0.5, -0.25), 0.0
    for _ in range(n):
        v = v.add(w).scale(0.5)
        total += v.dot(w)
    return total


def builtins_loop(n):
    # Mostly C calls: each is a c_call/c_return pair for the profilers.
    items = [1, "ab", (1, 2), 3.5, [4], {"k": 1}]
    table = {1: 2, "ab": 3}
    total = 0.0
    for i in range(n):
        x = items[i % 6]
        if isinstance(x, (str, tuple, list, dict)):
            total += len(x)
        if isinstance(x, (int, str)):
            total += table.get(x, 0)
        total += math.sqrt(i)
    return total


def numbers(n):
    yield from range(n)


def squares(it):
    for x in it:
        yield x * x


def evens(it):
    for x in it:
        if not x & 1:
            yield x


def pipeline(n):
    # Every resume and yield of a generator is a call and a return event.
    return sum(evens(squares(numbers(n))))


_PAIR = re.compile(r"(\w+)=(\d+)")
_WORD = re.compile(r"[a-z]+")


def _record(i):
    return {"id": i, "name": f"user{i}", "tags": ["red", "green", "blue"][: i % 4],
            "score": i * 0.5, "line": f"k{i % 7}={i} v{i % 5}={i % 13} w=3"}


def _summarize(records):
    counts = {}
    for r in records:
        for key, value in _PAIR.findall(r["line"]):
            counts[key] = counts.get(key, 0) + int(value)
    return counts


def mixed(n):
    """Something like real code: build records, round-trip them through
    json, parse fields with re, aggregate with comprehensions."""
    total = 0
    for batch in range(n):
        records = [_record(batch * 8 + i) for i in range(8)]
        text = json.dumps(records)
        back = json.loads(text)
        counts = _summarize(back)
        names = [r["name"].upper() for r in back if r["score"] > 1.0]
        tags = {t for r in back for t in r["tags"]}
        total += len(names) + len(tags) + sum(counts.values()) + len(_WORD.findall(text))
    return total


THREADS = 4
# Called first thing in each worker thread of threaded(); the benchmark's
# do-nothing C profile function installs itself there (it only ever hooks
# the thread that calls it).  Empty otherwise: no call, no event.
thread_hooks: list[Callable[[], None]] = []


def _worker(n):
    for hook in thread_hooks:
        hook()
    methods(n)


def threaded(n):
    """methods() split over THREADS threads started (and joined) inside the
    traced region, as a program would; the GIL runs one at a time."""
    workers = [threading.Thread(target=_worker, args=(n // THREADS,)) for _ in range(THREADS)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()


class Workload(NamedTuple):
    name: str
    fn: Callable[[int], object]
    full: int      # about 0.4-0.5 s of CPU untraced on CPython 3.11-3.13 here
    quick: int     # --quick: a smoke run, ~0.02-0.06 s
    threads: int   # threads that make events (besides the caller's few)
    about: str


WORKLOADS = [
    Workload("fib", fib, 33, 24, 1, "recursive fib(n): Python calls only"),
    Workload("methods", methods, 1_100_000, 30_000, 1,
             "method calls and __init__ on small __slots__ objects"),
    Workload("builtins", builtins_loop, 1_800_000, 50_000, 1,
             "a loop of len, isinstance, dict.get, math.sqrt: mostly C-call events"),
    Workload("generators", pipeline, 5_000_000, 150_000, 1,
             "a pipeline of three generators: a call and a return per resume"),
    Workload("mixed", mixed, 11_000, 400, 1,
             "json dumps/loads, re findall, comprehensions, small functions"),
    Workload("threads", threaded, 1_100_000, 30_000, THREADS,
             f"methods() split over {THREADS} threads started while traced"),
]
BY_NAME = {w.name: w for w in WORKLOADS}

# ---- counting profile events -------------------------------------------------


def count_events(fn, arg):
    """{event kind: count} of the profile callbacks (call, return, c_call,
    c_return, c_exception) that fn(arg) triggers on every thread, less the
    harness's own.  A Python profile function gets the same events as a C
    one."""
    def run(f, a):
        counters = {k: itertools.count() for k in
                    ("call", "return", "c_call", "c_return", "c_exception")}

        def count(frame, event, arg):
            next(counters[event])  # one C call: atomic under the GIL, from any thread

        threading.setprofile(count)
        sys.setprofile(count)
        f(a)
        sys.setprofile(None)
        threading.setprofile(None)
        return {k: next(c) for k, c in counters.items()}

    # The setprofile calls themselves add a few events (sys.setprofile(None)
    # is a c_call): measure them around an empty function, whose own call
    # and return stay counted.
    events, harness = run(fn, arg), run(lambda _: None, None)
    harness["call"] -= 1
    harness["return"] -= 1
    return {k: events[k] - harness[k] for k in events}


def count_callbacks(fn, arg):
    """All the profile callbacks fn(arg) triggers (see count_events)."""
    return sum(count_events(fn, arg).values())


# ---- Markdown ----------------------------------------------------------------


def markdown_table(header, rows, left=1):
    """A Markdown table: the first `left` columns left-aligned, the others
    right."""
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i < left else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
