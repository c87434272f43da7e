"""Build the C extensions; metadata is in pyproject.toml.

frametrace._tracer is the product (csrc/*.c).  frametrace._testing holds what
only the tests and benchmarks use (csrc/testing/), with its own copy of the
plain-C parts of the core it drives.
"""
import sys

# First of all: the C core needs POSIX threads, mmap and CLOCK_MONOTONIC,
# and elsewhere (Windows) would fail with a compiler error.
if not (sys.platform.startswith("linux") or sys.platform == "darwin"):
    sys.exit(
        f"frametrace supports Linux (macOS untested); this is {sys.platform!r}. "
        "It cannot be built here."
    )

import glob
import os
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# Hidden symbols: calls between the C files are direct, not through the PLT.
extra_compile_args = ["-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden"]
if os.environ.get("FRAMETRACE_WERROR"):
    extra_compile_args.append("-Werror")
extra_compile_args += os.environ.get("FRAMETRACE_CFLAGS", "").split()
extra_link_args = os.environ.get("FRAMETRACE_LDFLAGS", "").split()

ZLIB_TEST = """\
#include <zlib.h>
int main(void)
{
    z_stream s = {0};
    return deflateInit(&s, Z_DEFAULT_COMPRESSION) != Z_OK;
}
"""


def have_zlib(compiler, source=ZLIB_TEST):
    """Whether source compiles and links against -lz with this compiler
    (the one that builds the extension, with CPython's flags)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "zlib_test.c")
        with open(path, "w") as f:
            f.write(source)
        # The compiler's own messages would read as a failed build.
        saved = os.dup(2)
        try:
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), 2)
            objects = compiler.compile([path], output_dir=tmp)
            compiler.link_executable(objects, "zlib_test", output_dir=tmp, libraries=["z"])
        except Exception:  # CompileError, LinkError: their module moved over time
            return False
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    return True


def compile_in_parallel(compiler):
    """The compiler's compile() with its sources compiled side by side, a
    process per core (setuptools compiles one file at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    def compile_sources(sources, output_dir=None, macros=None, include_dirs=None, debug=0,
                        extra_preargs=None, extra_postargs=None, depends=None):
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj):
            src, ext = build[obj]
            compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(one, [obj for obj in objects if obj in build]))
        return objects
    compiler.compile = compile_sources


class BuildExt(build_ext):
    """zlib lets the C exporter write .json.gz directly; without it, Python
    compresses afterwards.  Found by compiling a test program."""

    def build_extensions(self):
        compile_in_parallel(self.compiler)
        if have_zlib(self.compiler):
            print("frametrace: zlib found (compiled and linked a test): "
                  "the C exporter writes .gz itself")
            ext = next(e for e in self.extensions if e.name == "frametrace._tracer")
            ext.define_macros.append(("FT_HAVE_ZLIB", "1"))
            ext.libraries.append("z")
        else:
            print("frametrace: zlib not found (a test program using deflateInit "
                  "did not compile and link with -lz): .gz files are compressed "
                  "by Python")
        super().build_extensions()


headers = sorted(glob.glob("csrc/*.h") + glob.glob("csrc/testing/*.h"))
testing_shares = ["csrc/clock.c", "csrc/glob.c", "csrc/monitor_tool.c", "csrc/nest.c",
                  "csrc/replay.c", "csrc/ring.c"]

setup(
    cmdclass={"build_ext": BuildExt},
    ext_modules=[
        Extension(
            "frametrace._tracer",
            sources=sorted(glob.glob("csrc/*.c")),
            depends=headers,
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
        ),
        Extension(
            "frametrace._testing",
            sources=sorted(glob.glob("csrc/testing/*.c")) + testing_shares,
            depends=headers,
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
        ),
    ],
)
