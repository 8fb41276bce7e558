"""Build the compiled core (src/tokenwire/_core.pyx over csrc/<layer>/*.c).

Without a working C compiler the build falls back to the pure-Python reference and says so;
the wheel it then makes holds no compiled code and is tagged ``py3-none-any``, so no installer
mistakes it for a platform build.

Environment switches, read at build time:
  TOKENWIRE_NO_EXTENSIONS=1     build nothing; the package runs on its pure-Python reference
  TOKENWIRE_REQUIRE_EXTENSIONS=1  a failed compile is an error (set automatically under CIBUILDWHEEL=1)
  TOKENWIRE_SANITIZE=address,undefined  build with those sanitizers (gcc/clang)
  TOKENWIRE_DEBUG=1             -O0 -g, assertions kept, symbols kept (release builds are stripped)
  TOKENWIRE_SYMBOLS=1           the release build with its symbol table kept (for perf and callgrind)
"""

import os
import sys
import tempfile
from glob import glob

from setuptools import Extension, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


NO_EXTENSIONS = _flag("TOKENWIRE_NO_EXTENSIONS")
REQUIRE_EXTENSIONS = _flag("TOKENWIRE_REQUIRE_EXTENSIONS") or _flag("CIBUILDWHEEL")
SANITIZE = os.environ.get("TOKENWIRE_SANITIZE", "").strip()
DEBUG = _flag("TOKENWIRE_DEBUG")
SYMBOLS = _flag("TOKENWIRE_SYMBOLS")


# The release extension's code layout (gcc and clang, ELF and Mach-O; each flag kept only if the
# compiler takes it): one exported symbol (PyInit__core: Python's headers mark it visible), so
# calls between the C kernels and the Cython module are direct, not through the PLT, and no call
# may be interposed at load time; calls into libpython and libc go through the GOT without a PLT
# stub. A 128-token parse touches fewer code lines (callgrind: 1,513 -> 1,451 simulated
# instruction-cache misses a call, mispredicted indirect branches 274 -> 233; benchmarks/RESULTS.md).
LAYOUT_FLAGS = ["-fvisibility=hidden", "-fno-semantic-interposition", "-fno-plt"]


FALLBACK_WARNING = """
WARNING: tokenwire's compiled core could not be built ({reason}).
Installing the pure-Python reference implementation only: correct, but far slower.
For the fast build, install a C compiler (gcc or clang; MSVC on Windows) and the Python
development headers, then reinstall from source:
    pip install --force-reinstall --no-cache-dir --no-binary tokenwire tokenwire
or install a prebuilt wheel on a platform that has one.
"""


class OptionalBuildExt(build_ext):
    """Fall back to the pure-Python reference when no compiler works, unless told not to."""

    gave_up = False

    def run(self):
        try:
            super().run()
        except Exception as exc:
            self._give_up(exc)

    def build_extension(self, ext):
        try:
            ext.extra_compile_args += [f for f in LAYOUT_FLAGS if self._takes(f)]
            super().build_extension(ext)
        except Exception as exc:
            self._give_up(exc)

    def _takes(self, flag):
        """Whether the compiler builds an empty file with ``flag``, warning-free."""
        if sys.platform == "win32":
            return False
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "flag.c")
            with open(src, "w") as f:
                f.write("int tw_flag_probe(void) { return 0; }\n")
            try:
                self.compiler.compile([src], output_dir=tmp, extra_postargs=[flag, "-Werror"])
            except Exception:
                return False
        return True

    def _give_up(self, exc):
        if REQUIRE_EXTENSIONS:
            raise
        OptionalBuildExt.gave_up = True
        reason = f"{type(exc).__name__}: {exc}"  # a failed compile quotes the whole command line
        reason = reason if len(reason) <= 160 else reason[:157] + "..."
        sys.stderr.write(FALLBACK_WARNING.format(reason=reason) + "\n")


class FallbackAwareWheel(bdist_wheel):
    """Builds first, so a wheel whose compiled core fell back is tagged pure (py3-none-any)."""

    def run(self):
        if not self.skip_build:
            self.run_command("build")
            self.skip_build = True
        if OptionalBuildExt.gave_up:
            self.root_is_pure = True
            self.distribution.ext_modules = []  # and installed as pure: no platlib scheme
        super().run()


def extensions():
    if NO_EXTENSIONS:
        return []
    import numpy
    from Cython.Build import cythonize

    compile_args: list[str] = []
    link_args: list[str] = []
    macros = [("NPY_NO_DEPRECATED_API", "NPY_2_0_API_VERSION")]
    if sys.platform == "win32":
        compile_args += ["/O2"]
    else:
        compile_args += ["-std=c11", "-O3" if not DEBUG else "-O0", "-Wall", "-Wno-unused-function"]
        if DEBUG or SANITIZE:
            compile_args += ["-g", "-fno-omit-frame-pointer"]
        if SANITIZE:
            compile_args += [f"-fsanitize={SANITIZE}", "-fno-sanitize-recover=all"]
            link_args += [f"-fsanitize={SANITIZE}"]
        elif not DEBUG and not SYMBOLS:
            # Python's own CFLAGS often carry -g: debug info would make the module ~6x larger.
            link_args += ["-Wl,-S,-x"] if sys.platform == "darwin" else ["-s"]
    if not DEBUG and not SANITIZE:
        macros.append(("NDEBUG", "1"))
    ext = Extension(
        "tokenwire._core",
        # csrc/ in folders by layer; every include names its folder ("json/tw_scan.h").
        sources=["src/tokenwire/_core.pyx", *sorted(glob("csrc/**/*.c", recursive=True))],
        include_dirs=["csrc", numpy.get_include()],
        depends=sorted(glob("csrc/**/*.h", recursive=True) + glob("csrc/**/*.def", recursive=True)
                       + glob("src/tokenwire/*.px[di]")),
        define_macros=macros,
        extra_compile_args=compile_args,
        extra_link_args=link_args,
    )
    return cythonize(
        [ext],
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "embedsignature": True,
            "freethreading_compatible": True,
        },
    )


setup(
    ext_modules=extensions(),
    cmdclass={"build_ext": OptionalBuildExt, "bdist_wheel": FallbackAwareWheel},
)
