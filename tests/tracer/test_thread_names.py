"""Thread names come from the public threading API, read while a tracer
runs (see tests/unit/test_private_api.py for the private API list)."""


import frametrace._testing
import frametrace._tracer


def test_thread_names_come_from_public_threading_api():
    """Names are read through threading.enumerate(): a thread renamed while
    traced is named so, one started and named while traced too."""
    import threading
    import time

    running = threading.Semaphore(0)
    done = threading.Event()

    def work():
        running.release()
        done.wait()

    early = threading.Thread(target=work, name="early")
    early.start()
    with frametrace.Tracer() as tr:
        late = threading.Thread(target=work, name="late")
        late.start()
        early.name = "renamed"
        running.acquire()
        running.acquire()  # both run their target: both are traced
        time.sleep(0.001)
    # Both still alive at stop(), which reads the names again.
    done.set()
    early.join()
    late.join()
    names = {t.thread_id: t.name for t in tr.threads}
    assert names[early.ident] == "renamed"
    assert names[late.ident] == "late"
    assert names[threading.main_thread().ident] == "MainThread"
