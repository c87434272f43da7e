"""Build the C extensions; metadata is in pyproject.toml.

frametrace._tracer is the product (csrc/*.c).  frametrace._testing holds what
only the tests and benchmarks use (csrc/testing/), with its own copy of the
plain-C parts of the core it drives.
"""
import glob
import os

from setuptools import Extension, setup

# Hidden symbols: calls between the C files are direct, not through the PLT.
extra_compile_args = ["-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden"]
if os.environ.get("FRAMETRACE_WERROR"):
    extra_compile_args.append("-Werror")
extra_compile_args += os.environ.get("FRAMETRACE_CFLAGS", "").split()
extra_link_args = os.environ.get("FRAMETRACE_LDFLAGS", "").split()

# zlib lets the C exporter write .json.gz directly; without it, Python
# compresses afterwards.
define_macros = []
libraries = []
if any(os.path.exists(os.path.join(d, "zlib.h")) for d in ("/usr/include", "/usr/local/include")):
    define_macros.append(("FT_HAVE_ZLIB", "1"))
    libraries.append("z")

headers = sorted(glob.glob("csrc/*.h") + glob.glob("csrc/testing/*.h"))
testing_shares = ["csrc/clock.c", "csrc/monitor_tool.c", "csrc/replay.c", "csrc/ring.c"]

setup(
    ext_modules=[
        Extension(
            "frametrace._tracer",
            sources=sorted(glob.glob("csrc/*.c")),
            depends=headers,
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
            define_macros=define_macros,
            libraries=libraries,
        ),
        Extension(
            "frametrace._testing",
            sources=sorted(glob.glob("csrc/testing/*.c")) + testing_shares,
            depends=headers,
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
            define_macros=define_macros,
        ),
    ],
)
