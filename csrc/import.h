/* Importing a module from C whatever code is running. */
#ifndef FT_IMPORT_H
#define FT_IMPORT_H

#include <Python.h>

/* `import name` (a top-level module), new reference or NULL with an
 * exception.  Not PyImport_ImportModule(): it looks __import__ up in the
 * running frame's globals["__builtins__"] and raises KeyError where those
 * globals have none (code exec()'d in a bare dict), which made stop()
 * fail there and keep sys.monitoring's tool id. */
static inline PyObject *
ft_import(const char *name)
{
    return PyImport_ImportModuleLevel(name, NULL, NULL, NULL, 0);
}

#endif
