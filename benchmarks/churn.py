"""CPU time per thread of a thread churn, for counting instructions under
callgrind (load-independent, unlike the times of threads.py).

    python benchmarks/churn.py untraced|setprofile|monitoring N
    valgrind --tool=callgrind python benchmarks/churn.py setprofile 300

N threads of 12 calls each, started and joined one after the other, after
50 of warm-up; prints the mode and the process's CPU microseconds per
thread.  Two runs (N=300 and N=100) differ by 200 threads' cost.  A
report, never a test.
"""
import sys
import threading
import time

import frametrace


def leaf(i):
    return i + 1


def body():
    for i in range(12):
        leaf(i)


def churn(n):
    cpu0 = time.process_time_ns()
    for _ in range(n):
        t = threading.Thread(target=body)
        t.start()
        t.join()
    return (time.process_time_ns() - cpu0) / n / 1e3


def main():
    mode, n = sys.argv[1], int(sys.argv[2])
    churn(50)
    if mode == "untraced":
        print(mode, churn(n))
        return
    tracer = frametrace.Tracer(backend=mode)
    tracer.start()
    try:
        print(mode, churn(n))
    finally:
        tracer.stop()


if __name__ == "__main__":
    main()
