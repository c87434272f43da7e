"""What the Perfetto UI shows of a trace, against what frametrace recorded.

``snapshot(loaded)`` reads the UI's trace processor (slices, thread tracks,
threads, processes, stats); ``compare(expected, seen)`` returns the table
of per-thread counts it compared and the problems found.  Python/C slices
are told from ranges and steps by category ("range", "step"; the .pftrace
writer gives Python slices no category at all)."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

class Mismatch(AssertionError):
    """The UI shows a trace otherwise than recorded (what an xfail mark of
    a known fault names, so that a UI that fails to load still fails)."""


MARKS = ("range", "step")  # the categories of a session's ranges and steps
TIME_TOLERANCE_NS = 1  # JSON holds microseconds with three decimals: exact but for rounding


@dataclass
class ThreadExpect:
    name: str
    events: list  # frametrace.Event, in getEvents() order


@dataclass
class Expected:
    processes: dict = field(default_factory=dict)  # pid -> process name
    threads: dict = field(default_factory=dict)  # (pid, tid) -> ThreadExpect
    steps: list = field(default_factory=list)  # step names
    ranges: list = field(default_factory=list)  # range names


def expected_of(recorded: dict, into: Expected | None = None) -> Expected:
    """recorded (produce.py's pickle, or the like): its events per thread,
    keyed by (pid, native thread id), the Chrome tid of a thread whose
    native id no earlier thread of the trace had."""
    exp = into or Expected()
    pid = recorded["pid"]
    exp.processes[pid] = recorded["process_name"]
    by_serial = {}
    for serial, thread_id, native, name, _dropped in recorded["threads"]:
        key = (pid, native)
        assert key not in exp.threads, f"native thread id {native} reused: pick another workload"
        exp.threads[key] = by_serial[serial] = ThreadExpect(name or f"thread {thread_id}", [])
    for ev in recorded["events"]:
        by_serial[ev.thread_serial].events.append(ev)
    exp.steps += list(recorded.get("steps", []))
    exp.ranges += [name for name, _thread in recorded.get("ranges", [])]
    return exp


def snapshot(loaded) -> dict:
    """The tables of the UI's trace processor the comparison reads."""
    return {
        "slices": loaded.query("select id, parent_id, ts, dur, category, name, track_id "
                               "from slice"),
        "thread_tracks": loaded.query("select id, utid from thread_track"),
        "threads": loaded.query("select t.utid, t.tid, t.name, p.pid from thread t "
                                "left join process p using (upid)"),
        "processes": loaded.query("select upid, pid, name from process"),
        "tracks": loaded.query("select id, name from track"),
        # Everything the importer counted; errors and data losses fail.
        "stats": loaded.query("select name, idx, severity, source, value from stats "
                              "where value > 0 order by severity, name"),
    }


def bad_stats(seen: dict) -> list:
    return [s for s in seen["stats"] if s["severity"] in ("error", "data_loss")]


def stat_text(s: dict) -> str:
    idx = f"[{s['idx']}]" if s["idx"] is not None else ""
    return f"{s['name']}{idx} = {s['value']} ({s['severity']}, {s['source']})"


def compare(expected: Expected, seen: dict) -> tuple[list, list]:
    """(table lines, problems): every thread's Python/C slices against its
    events (count, names, depth among Python/C slices, times relative to
    the process's first event), thread and process names, steps, ranges,
    and the importer's stats."""
    slices = {s["id"]: s for s in seen["slices"]}
    track_utid = {t["id"]: t["utid"] for t in seen["thread_tracks"]}
    threads = {t["utid"]: t for t in seen["threads"]}
    processes = {p["pid"]: p for p in seen["processes"] if p["pid"] is not None}
    problems = []

    def is_frame(s: dict) -> bool:
        return s["category"] not in MARKS

    def frame_depth(s: dict) -> int:
        # Depth among Python/C slices only: a range on the same track, if
        # any, adds a level that is none of frametrace's.
        depth, parent = 0, s["parent_id"]
        while parent is not None:
            p = slices[parent]
            depth += is_frame(p)
            parent = p["parent_id"]
        return depth

    utids_of: dict = {}
    for utid, t in threads.items():
        utids_of.setdefault((t["pid"], t["tid"]), []).append(utid)
    frames_by_utid: dict = {}
    for s in slices.values():
        if is_frame(s):
            frames_by_utid.setdefault(track_utid.get(s["track_id"]), []).append(s)

    rows = [f"{'pid':>7} {'tid':>7}  {'thread':<16} {'events':>7} {'slices':>7} "
            f"{'depth':>9} {'names':>6} {'times':>6}"]
    got_of = {key: [s for u in utids_of.get(key, []) for s in frames_by_utid.get(u, [])]
              for key in expected.threads}
    matched_utids = {u for key in expected.threads for u in utids_of.get(key, [])}
    # Times are compared from each process's first event (the UI's clock
    # may differ from frametrace's by a constant: a merge's shift, or the
    # BOOTTIME that .pftrace timestamps are converted to).
    origins: dict = {}
    for (pid, tid), want in expected.threads.items():
        o = origins.setdefault(pid, [None, None])
        for i, ts in enumerate((min((e.start_ns for e in want.events), default=None),
                                min((s["ts"] for s in got_of[pid, tid]), default=None))):
            if ts is not None:
                o[i] = ts if o[i] is None else min(o[i], ts)
    for (pid, tid), want in expected.threads.items():
        utids = utids_of.get((pid, tid), [])
        label = f"pid {pid} tid {tid} ({want.name})"
        names = sorted({threads[u]["name"] or "" for u in utids})
        if not utids:
            problems.append(f"{label}: no such thread in the UI")
        elif names != [want.name]:
            problems.append(f"{label}: the UI names the thread {names}")
        got = got_of[pid, tid]
        ev_keys = sorted((e.start_ns, e.depth, e.end_ns, e.name) for e in want.events)
        sl_keys = sorted((s["ts"], frame_depth(s), s["ts"] + s["dur"], s["name"]) for s in got)
        ev_names = Counter((k[3], k[1]) for k in ev_keys)  # (name, depth)
        sl_names = Counter((k[3], k[1]) for k in sl_keys)
        names_ok = ev_names == sl_names
        depth_e = max((k[1] for k in ev_keys), default=-1)
        depth_s = max((k[1] for k in sl_keys), default=-1)
        if len(got) != len(want.events):
            problems.append(f"{label}: {len(want.events)} events, {len(got)} slices in the UI")
        if not names_ok:
            problems.append(f"{label}: (name, depth) not shown: "
                            f"{dict((ev_names - sl_names).most_common(5))}; shown, not recorded: "
                            f"{dict((sl_names - ev_names).most_common(5))}")
        times = "-"
        if names_ok and len(got) == len(want.events) and got:
            e0, s0 = origins[pid]
            worst = max(max(abs((e[0] - e0) - (s[0] - s0)), abs((e[2] - e[0]) - (s[2] - s[0])))
                        for e, s in zip(ev_keys, sl_keys))
            times = f"{worst}ns"
            if worst > TIME_TOLERANCE_NS:
                problems.append(f"{label}: a start or duration differs by {worst} ns")
        rows.append(f"{pid:>7} {tid:>7}  {want.name[:16]:<16} {len(want.events):>7} {len(got):>7} "
                    f"{depth_e:>4}/{depth_s:<4} {'ok' if names_ok else 'DIFF':>6} {times:>6}")

    stray = sum(len(v) for u, v in frames_by_utid.items() if u not in matched_utids)
    if stray:
        problems.append(f"{stray} Python/C slices on tracks of no traced thread")
    for pid, name in expected.processes.items():
        got_name = processes.get(pid, {}).get("name")
        if got_name != name:
            problems.append(f"pid {pid}: process named {got_name!r} in the UI, {name!r} recorded")
    rows.append("processes: " + ", ".join(f"{pid} {processes.get(pid, {}).get('name')!r}"
                                         for pid in expected.processes))

    steps = [s for s in slices.values() if s["category"] == "step"]
    ranges = [s for s in slices.values() if s["category"] == "range"]
    if expected.steps or steps:
        on_threads = sum(1 for s in steps if track_utid.get(s["track_id"]) in matched_utids)
        rows.append(f"steps: {len(expected.steps)} recorded, {len(steps)} shown, "
                    f"{on_threads} on a traced thread's track")
        if Counter(expected.steps) != Counter(s["name"] for s in steps):
            problems.append(f"steps: {sorted(expected.steps)} recorded, "
                            f"{sorted(s['name'] for s in steps)} shown")
        if on_threads:
            problems.append(f"steps: {on_threads} on the track of a traced thread")
    if expected.ranges or ranges:
        want, shown = Counter(expected.ranges), Counter(s["name"] for s in ranges)
        rows.append(f"ranges: {len(expected.ranges)} expected, {len(ranges)} shown "
                    f"({', '.join(f'{n} {c}' for n, c in sorted(want.items()))})")
        if want != shown:
            problems.append(f"ranges not shown: {dict(want - shown)}; "
                            f"shown, not expected: {dict(shown - want)}")
    for s in bad_stats(seen):
        problems.append(f"stats: {stat_text(s)}")
    rows.append("stats (value > 0): " + ("; ".join(stat_text(s) for s in seen["stats"]) or "none"))
    return rows, problems
