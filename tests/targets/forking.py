"""Functions run in child processes by tests/system/test_fork.py; importable by
name, as multiprocessing's spawn needs."""
import sys


def leaf(n):
    return sum(range(n))


def child_work(n):
    return [leaf(i) for i in range(n)]


def trace_in_child(queue):
    """Runs in a child process: what the child sees of tracing."""
    import frametrace

    report = {"getprofile_is_none": sys.getprofile() is None}
    with frametrace.trace() as tracer:
        child_work(3)
    events = tracer.getEvents()
    names = [e.name for e in events]
    report["child_work"] = names.count("child_work")
    report["leaf"] = names.count("leaf")
    report["ends_by_stop"] = all(e.end_ns <= tracer.stop_ns for e in events)
    queue.put(report)
