/* The flight recorder's signal, caught in C (frametrace/flight.py): a
 * handler that writes the signal's number to the recorder's socket (its
 * watchdog thread takes the dump), then passes the signal on to the action
 * it replaced, Python's handler included (which runs the Python-level
 * handler and writes to the wakeup fd, asyncio's or anyone's).
 *
 * Neither the wakeup fd nor Python's table of handlers is touched, so
 * another tool's use of either goes on beside it.  When another handler
 * replaces the relay meanwhile, relaying again chains to that one; the end
 * puts back the action found only where the relay still is (else theirs
 * stays).
 *
 * A signal handler reaches no module state: the relays are static, one a
 * signal number, changed only with the GIL held; the handler reads them
 * with atomics and counts itself in `running` so that the end can wait
 * until no handler still uses the socket.  The action passed on to is
 * published through two slots: the spare one written (once no handler
 * runs, so none still reads it), then `current` switched to it; the
 * handler loads `current` once.
 *
 * A handler that replaced the relay may have saved it and chain to it;
 * relayed again behind that one, the signal would go relay, theirs,
 * relay, theirs... for ever.  A thread-local mark stops it: the relay
 * reached again on the thread that is relaying that signal returns at
 * once (the byte written once, theirs run once). */
#include "state.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#ifndef NSIG
#  define NSIG 65
#endif

typedef struct {
    struct sigaction prev[2];  /* the action the relay replaced: ... */
    atomic_int current;        /* ... prev[current] */
    atomic_int fd;          /* the recorder's socket; -1: none */
    atomic_int pid;         /* its process: a forked child writes nothing */
    atomic_int running;     /* handlers inside now, in any thread */
    int installed;          /* prev holds what to put back */
} ft_relay;

static ft_relay relays[NSIG];

/* The signals this thread is relaying now, bit signum - 1 (NSIG <= 65).
 * initial-exec: static TLS, no allocation (__tls_get_addr) on the first
 * use in a thread, which may be in a signal handler. */
#if defined(__GNUC__) || defined(__clang__)
#  define FT_TLS_MODEL __attribute__((tls_model("initial-exec")))
#else
#  define FT_TLS_MODEL
#endif
static _Thread_local unsigned long long relaying FT_TLS_MODEL;

_Static_assert(NSIG <= 65, "a signal's bit in relaying");

static void
relay_handler(int signum, siginfo_t *info, void *context)
{
    unsigned long long bit = 1ULL << ((unsigned)(signum - 1) & 63);
    if (relaying & bit) {
        return;  /* reached again through a handler it passed the signal on to */
    }
    relaying |= bit;
    int saved_errno = errno;
    ft_relay *relay = &relays[signum];
    atomic_fetch_add(&relay->running, 1);
    const struct sigaction *prev = &relay->prev[atomic_load(&relay->current)];
    int fd = atomic_load(&relay->fd);
    if (fd >= 0 && atomic_load(&relay->pid) == (int)getpid()) {
        unsigned char byte = (unsigned char)signum;
        /* Non-blocking; a full socket has a dump asked already. */
        ssize_t written = write(fd, &byte, 1);
        (void)written;
    }
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction != NULL) {
            prev->sa_sigaction(signum, info, context);
        }
    }
    else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(signum);
    }
    atomic_fetch_sub(&relay->running, 1);
    errno = saved_errno;
    relaying &= ~bit;
}

/* The ints of args (n of them), or -1 with TypeError/OverflowError. */
static int
int_args(const char *name, PyObject *const *args, Py_ssize_t nargs,
         Py_ssize_t n, int *out)
{
    if (nargs != n) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)",
                     name, n, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long value = PyLong_AsLong(args[i]);
        if (value == -1 && PyErr_Occurred()) {
            return -1;
        }
        if (value < INT_MIN || value > INT_MAX) {
            PyErr_Format(PyExc_OverflowError, "%s(): %ld out of range", name,
                         value);
            return -1;
        }
        out[i] = (int)value;
    }
    return 0;
}

static int
is_relay(const struct sigaction *action)
{
    return (action->sa_flags & SA_SIGINFO)
           && action->sa_sigaction == relay_handler;
}

static PyObject *
relay_signal(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int values[2];
    if (int_args("_relay_signal", args, nargs, 2, values) < 0) {
        return NULL;
    }
    int signum = values[0], fd = values[1];
    if (signum < 1 || signum >= NSIG || fd < 0) {
        PyErr_Format(PyExc_ValueError, "_relay_signal(): signal %d or fd %d "
                     "out of range", signum, fd);
        return NULL;
    }
    ft_relay *relay = &relays[signum];
    struct sigaction current;
    if (sigaction(signum, NULL, &current) < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    atomic_store(&relay->pid, (int)getpid());
    atomic_store(&relay->fd, fd);
    if (is_relay(&current)) {
        Py_RETURN_FALSE;  /* still there */
    }
    /* The action found (or the one that replaced the relay since) is what
     * the relay passes the signal on to, and what the end puts back. */
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = relay_handler;
    action.sa_mask = current.sa_mask;
    /* Python's handler goes without SA_RESTART (unless siginterrupt()),
     * so that blocking calls return to run the Python-level handler: kept.
     * With no handler to pass it on to, calls go on undisturbed. */
    int passes_on = (current.sa_flags & SA_SIGINFO)
                    || (current.sa_handler != SIG_DFL
                        && current.sa_handler != SIG_IGN);
    int restart = passes_on ? current.sa_flags & SA_RESTART : SA_RESTART;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK | restart;
    /* A handler of the relay replaced may still be passing a signal on,
     * reading the slot before the current one: the spare written next. */
    while (atomic_load(&relay->running) > 0) {
        sched_yield();
    }
    int spare = 1 - atomic_load(&relay->current);
    relay->prev[spare] = current;
    atomic_store(&relay->current, spare);
    relay->installed = 1;
    if (sigaction(signum, &action, NULL) < 0) {
        relay->installed = 0;
        atomic_store(&relay->fd, -1);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_TRUE;
}

static PyObject *
unrelay_signal(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int signum;
    if (int_args("_unrelay_signal", args, nargs, 1, &signum) < 0) {
        return NULL;
    }
    if (signum < 1 || signum >= NSIG) {
        PyErr_Format(PyExc_ValueError, "_unrelay_signal(): signal %d out of "
                     "range", signum);
        return NULL;
    }
    ft_relay *relay = &relays[signum];
    if (!relay->installed) {
        Py_RETURN_FALSE;
    }
    struct sigaction current;
    memset(&current, 0, sizeof(current));
    int ours = sigaction(signum, NULL, &current) == 0 && is_relay(&current);
    int restored = ours && sigaction(signum,
                                     &relay->prev[atomic_load(&relay->current)],
                                     NULL) == 0;
    /* No handler writes to the socket once this returns (the caller
     * closes it): one running now, on another thread, ends first. */
    atomic_store(&relay->fd, -1);
    while (atomic_load(&relay->running) > 0) {
        sched_yield();
    }
    if (restored || !ours) {
        relay->installed = 0;
    }
    return PyBool_FromLong(restored);
}

PyMethodDef ft_relay_signal_def = {
    "_relay_signal", (PyCFunction)(void (*)(void))relay_signal, METH_FASTCALL,
    "_relay_signal($module, signum, fd, /)\n--\n\n"
    "Catches signum in C: each one writes a byte (its number) to fd, a\n"
    "non-blocking socket, then goes to the action it replaced.  Again\n"
    "after another handler replaced it: chained to that one.  True if\n"
    "installed now, False if it was there (its fd updated).  Internal:\n"
    "frametrace.flight's.",
};

PyMethodDef ft_unrelay_signal_def = {
    "_unrelay_signal", (PyCFunction)(void (*)(void))unrelay_signal,
    METH_FASTCALL,
    "_unrelay_signal($module, signum, /)\n--\n\n"
    "Ends _relay_signal(signum): the action it replaced is put back if\n"
    "the relay is still there (True), else the handler there stays\n"
    "(False).  No byte is written to its fd once this returns.",
};
