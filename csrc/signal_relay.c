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
 * once (the byte written once, theirs run once).
 *
 * frametrace run's SIGTERM goes through a relay too (frametrace/_endings.py):
 * Python runs its handler in the main thread between bytecodes, which a
 * main thread blocked in C never reaches (a SIGTERM caught just before a
 * sem_wait: an idle Pool worker at the Pool's exit).  _watch_relayed()
 * starts a C thread that waits for the relay's byte, then a grace period,
 * then takes a thread state (none before: no thread of the trace) and
 * calls back, which ends the run; _die_of_signal() ends the process from
 * any thread. */
#include "state.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
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

/* A watch: a thread of its own, with no thread state (no thread of the
 * trace) until it calls back. */
typedef struct {
    int fd;
    int grace_ms;
    PyObject *callback;  /* strong */
    sem_t *started;      /* posted once the thread waits: the creator's */
} ft_watch;

/* The latest watch, until its thread frees it: a forked child, which has
 * none of the parent's threads, still reaches it (no leak reported). */
static _Atomic(ft_watch *) latest_watch;

static void
free_watch(ft_watch *watch)
{
    ft_watch *expected = watch;
    atomic_compare_exchange_strong(&latest_watch, &expected, NULL);
    free(watch);
}

/* signum's default action back, unblocked in this thread, raised: a
 * signal whose default ends the process ends it here.  -1 if it could not
 * be set (errno). */
static int
die_of(int signum)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signum);
    if (sigaction(signum, &dfl, NULL) < 0) {
        return -1;
    }
    int err = pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    if (err != 0) {
        errno = err;
        return -1;
    }
    raise(signum);
    return 0;
}

static void *
watch_main(void *arg)
{
    ft_watch *watch = arg;
    /* The signals go to the process's other threads: a blocked main
     * thread's wait is interrupted where it can be. */
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    unsigned char byte = 0;
    ssize_t got;
    sem_post(watch->started);  /* never touched again */
    do {
        got = read(watch->fd, &byte, 1);
    } while (got < 0 && errno == EINTR);
    if (got == 1) {
        struct timespec left = {watch->grace_ms / 1000,
                                (watch->grace_ms % 1000) * 1000000L};
        while (nanosleep(&left, &left) < 0 && errno == EINTR) {
        }
    }
    if (got <= 0) {
        close(watch->fd);  /* closed at the other end: the watch is over */
    }
    /* else left open: the watch's owner closes it in a forked child. */
    if (FT_FINALIZING()) {
        /* The run is over (its trace written) and no thread state can be
         * had: the signal ends the process as it would untraced.  A
         * closed watch leaves its callback (the process is ending). */
        if (got == 1) {
            die_of((int)byte);
        }
        free_watch(watch);
        return NULL;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    if (got == 1) {
        PyObject *result = PyObject_CallNoArgs(watch->callback);
        if (result == NULL) {
            PyErr_WriteUnraisable(watch->callback);
        }
        Py_XDECREF(result);
    }
    Py_DECREF(watch->callback);
    PyGILState_Release(gil);
    free_watch(watch);
    return NULL;
}

static PyObject *
watch_relayed(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "_watch_relayed() takes 3 arguments "
                     "(%zd given)", nargs);
        return NULL;
    }
    int values[2];
    if (int_args("_watch_relayed", args, 2, 2, values) < 0) {
        return NULL;
    }
    if (values[0] < 0 || values[1] < 0) {
        PyErr_Format(PyExc_ValueError, "_watch_relayed(): fd %d or grace %d "
                     "ms out of range", values[0], values[1]);
        return NULL;
    }
    if (!PyCallable_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "_watch_relayed(): callback is not "
                        "callable");
        return NULL;
    }
    ft_watch *watch = malloc(sizeof(*watch));
    if (watch == NULL) {
        return PyErr_NoMemory();
    }
    watch->fd = values[0];
    watch->grace_ms = values[1];
    watch->callback = Py_NewRef(args[2]);
    /* Returns once the thread is started and waiting: a fork from now on
     * finds it in read(), holding no lock (an allocator's included). */
    sem_t started;
    if (sem_init(&started, 0, 0) < 0) {
        Py_DECREF(watch->callback);
        free(watch);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    watch->started = &started;
    pthread_attr_t attr;
    pthread_t thread;
    int err = pthread_attr_init(&attr);
    if (err == 0) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        atomic_store(&latest_watch, watch);
        err = pthread_create(&thread, &attr, watch_main, watch);
        pthread_attr_destroy(&attr);
    }
    if (err != 0) {
        sem_destroy(&started);
        ft_watch *expected = watch;
        atomic_compare_exchange_strong(&latest_watch, &expected, NULL);
        Py_DECREF(watch->callback);
        free(watch);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_BEGIN_ALLOW_THREADS
    while (sem_wait(&started) < 0 && errno == EINTR) {
    }
    Py_END_ALLOW_THREADS
    sem_destroy(&started);
    Py_RETURN_NONE;
}

static PyObject *
die_of_signal(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int signum;
    if (int_args("_die_of_signal", args, nargs, 1, &signum) < 0) {
        return NULL;
    }
    if (signum < 1 || signum >= NSIG) {
        PyErr_Format(PyExc_ValueError, "_die_of_signal(): signal %d out of "
                     "range", signum);
        return NULL;
    }
    if (die_of(signum) < 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

PyMethodDef ft_watch_relayed_def = {
    "_watch_relayed", (PyCFunction)(void (*)(void))watch_relayed,
    METH_FASTCALL,
    "_watch_relayed($module, fd, grace_ms, callback, /)\n--\n\n"
    "Starts a thread that waits for a byte on fd (the read end of a\n"
    "_relay_signal() pipe), then grace_ms more, then calls callback() on\n"
    "a thread state of its own.  Every signal is blocked in that thread.\n"
    "Once fd's other end is closed, the thread closes fd and ends.\n"
    "Internal: frametrace._endings'.",
};

PyMethodDef ft_die_of_signal_def = {
    "_die_of_signal", (PyCFunction)(void (*)(void))die_of_signal,
    METH_FASTCALL,
    "_die_of_signal($module, signum, /)\n--\n\n"
    "From any thread: signum's default action back, unblocked in this\n"
    "thread, and raised.  Returns only if that action does not end the\n"
    "process.  Internal: frametrace._endings'.",
};

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
