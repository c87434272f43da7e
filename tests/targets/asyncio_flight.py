"""An asyncio server (asyncio.start_server on 127.0.0.1) with a SIGTERM
handler (loop.add_signal_handler) and a flight recorder, for
tests/system/test_flight_recorder.py.

    python asyncio_flight.py ORDER DUMPDIR

ORDER says when the recorder runs:

- "overlap": entered in the loop before the SIGTERM handler is added,
  ended while the loop goes on;
- "inside": entered in the loop after the handler is added, ended while
  the loop goes on;
- "outside": around asyncio.run().

It prints "ready PORT" once the server, the handler and the recorder are
there.  A connection sending "end" ends the recorder ("overlap",
"inside"; it answers "ended").  SIGTERM runs the asyncio handler, which
ends the loop: it prints "sigterm".  "outside" then prints "loop closed"
and waits for a line on stdin before the recorder ends.  Last it prints
"restored" if the recorder's signal has its handler back (SIG_DFL) and the
wakeup fd is the one it found, then the dumps, one a line."""
import asyncio
import signal
import sys

import frametrace


def work():
    return sum(range(1000))


def recorder(dump_dir):
    return frametrace.flight_recorder(dump_dir, slow_factor=None, slow_ms=3_600_000.0,
                                      min_interval=0.0, watchdog=False)


def wakeup_fd():
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


async def serve(order, rec):
    loop = asyncio.get_running_loop()
    stopped = asyncio.Event()
    ended = asyncio.Event()

    async def client(reader, writer):
        if (await reader.readline()).strip() == b"end":
            rec.__exit__(None, None, None)
            ended.set()
            writer.write(b"ended\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(client, "127.0.0.1", 0)
    if order == "overlap":
        rec.__enter__()
    loop.add_signal_handler(signal.SIGTERM, stopped.set)
    if order == "inside":
        rec.__enter__()
    found = wakeup_fd()
    print("ready", server.sockets[0].getsockname()[1], flush=True)
    while not stopped.is_set():
        work()
        frametrace.step()
        await asyncio.sleep(0.01)
    print("sigterm", flush=True)
    server.close()
    await server.wait_closed()
    if order != "outside":
        assert ended.is_set()
        if signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL and wakeup_fd() == found:
            print("restored", flush=True)


def main(order, dump_dir):
    rec = recorder(dump_dir)
    if order == "outside":
        with rec:
            asyncio.run(serve(order, rec))
            print("loop closed", flush=True)
            sys.stdin.readline()  # in C: the signal's dump comes meanwhile
        if signal.getsignal(signal.SIGUSR2) is signal.SIG_DFL and wakeup_fd() == -1:
            print("restored", flush=True)
    else:
        asyncio.run(serve(order, rec))
    for path in rec.dumps:
        print(path, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:3])
