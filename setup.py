"""Build of mini's C++ extension, ``mini.backends._cpu``.

Everything else about the distribution lives in pyproject.toml; this file exists because
the extension needs a build step that checks the compiler: the kernels use OpenMP, and
compilers without it (Apple clang, for one) must still build them, on one thread.

Before compiling, ``build_ext`` test-compiles and links a tiny OpenMP program with the
same compiler.  If that works, the extension gets ``-fopenmp`` (``/openmp`` on MSVC);
if not, it is built serially with ``MINI_NO_OPENMP`` defined, and mini warns once at
import.  Environment switches:

- ``MINI_NO_OPENMP=1``: build serially even where OpenMP works.
- ``MINI_CPU_ARCH=native``: add ``-march=native`` (faster on the machine that builds it,
  possibly broken on another CPU; off by default).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

from pybind11.setup_helpers import Pybind11Extension
from pybind11.setup_helpers import build_ext as _pybind11_build_ext
from setuptools import setup

CPU_DIR = os.path.join("mini", "backends", "cpu")

OMP_TEST = r"""
#include <omp.h>
int main() {
    int n = 0;
#pragma omp parallel reduction(+:n)
    n += 1;
    return (n >= 1 && omp_get_max_threads() >= 1) ? 0 : 1;
}
"""


def _log(msg: str) -> None:
    print(f"mini setup: {msg}", file=sys.stderr)


class build_ext(_pybind11_build_ext):
    """pybind11's build_ext, plus OpenMP detection and -O3."""

    def _try_flags(self, compile_args: list[str], link_args: list[str], source: str = OMP_TEST) -> bool:
        tmp = tempfile.mkdtemp(prefix="mini-omp-")
        try:
            src = os.path.join(tmp, "omp_test.cpp")
            with open(src, "w") as f:
                f.write(source)
            objects = self.compiler.compile([src], output_dir=tmp, extra_postargs=compile_args)
            self.compiler.link_executable(objects, "omp_test", output_dir=tmp, extra_postargs=link_args,
                                          target_lang="c++")
            return True
        except Exception:  # CompileError, LinkError, or a missing compiler executable
            return False
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _openmp_flags(self) -> tuple[list[str], list[str]] | None:
        if os.environ.get("MINI_NO_OPENMP", "") not in ("", "0"):
            _log("MINI_NO_OPENMP is set: building the cpu kernels without OpenMP")
            return None
        if self.compiler.compiler_type == "msvc":
            candidates = [(["/openmp"], [])]
        else:
            candidates = [
                (["-fopenmp"], ["-fopenmp"]),                    # gcc, LLVM clang
                (["-Xpreprocessor", "-fopenmp"], ["-lomp"]),     # Apple clang + Homebrew libomp
            ]
        for compile_args, link_args in candidates:
            if self._try_flags(compile_args, link_args):
                _log(f"OpenMP works (compile: {' '.join(compile_args)}; link: {' '.join(link_args) or 'nothing extra'})")
                return compile_args, link_args
        _log("WARNING: this compiler has no working OpenMP; the cpu kernels will run on one thread")
        return None

    def build_extensions(self) -> None:
        msvc = self.compiler.compiler_type == "msvc"
        omp = self._openmp_flags()
        # -fno-math-errno: the kernels never read errno, and without it sqrt cannot vectorise.
        extra_compile = ["/O2"] if msvc else ["-O3", "-fno-math-errno"]
        if not msvc and os.environ.get("MINI_CPU_ARCH") == "native":
            if self._try_flags(["-march=native"], [], "int main() { return 0; }\n"):
                extra_compile.append("-march=native")
            else:
                _log("MINI_CPU_ARCH=native requested but the compiler rejects -march=native; ignored")
        for ext in self.extensions:
            ext.extra_compile_args = list(ext.extra_compile_args or []) + extra_compile
            if omp is None:
                ext.define_macros = list(ext.define_macros or []) + [("MINI_NO_OPENMP", "1")]
            else:
                ext.extra_compile_args += omp[0]
                ext.extra_link_args = list(ext.extra_link_args or []) + omp[1]
        super().build_extensions()


ext_modules = [
    Pybind11Extension(
        "mini.backends._cpu",
        sources=[os.path.join(CPU_DIR, "kernels.cpp")],
        depends=sorted(
            os.path.join(CPU_DIR, f)
            for f in os.listdir(CPU_DIR)
            if f.endswith((".h", ".hpp"))
        ) if os.path.isdir(CPU_DIR) else [],
        cxx_std=17,
    ),
]

setup(ext_modules=ext_modules, cmdclass={"build_ext": build_ext})
