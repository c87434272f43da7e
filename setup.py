"""Build the C extension frametrace._tracer; metadata is in pyproject.toml."""
import glob
import os

from setuptools import Extension, setup

extra_compile_args = ["-std=c11", "-Wall", "-Wextra"]
if os.environ.get("FRAMETRACE_WERROR"):
    extra_compile_args.append("-Werror")
extra_compile_args += os.environ.get("FRAMETRACE_CFLAGS", "").split()
extra_link_args = os.environ.get("FRAMETRACE_LDFLAGS", "").split()

setup(
    ext_modules=[
        Extension(
            "frametrace._tracer",
            sources=sorted(glob.glob("csrc/*.c")),
            depends=sorted(glob.glob("csrc/*.h")),
            extra_compile_args=extra_compile_args,
            extra_link_args=extra_link_args,
        )
    ],
)
