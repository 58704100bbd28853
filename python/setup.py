"""Builds kvcodec._kvcodec with CMake for pip, out of the source tree.

The C++ sources are cpp/ beside this file in an sdist (scripts/build_python_dist.sh puts them
there) or, in a repository checkout, the repository one folder up. A Release build of only what
the extension needs (KVCODEC_PYTHON_ONLY: no llama.cpp) is made in setuptools' temporary build
folder. KVCODEC_CMAKE_BUILD_DIR names an already configured build of the same sources to take the
extension from instead (the test suite reuses its dev build so); KVCODEC_CMAKE_ARGS adds configure
arguments.

From a checkout (`pip install ./python`), setuptools' build folder and egg-info go to a temporary
folder that is removed afterwards, so the source tree gains no python/build, python/*.egg-info or
build/python.
"""

import atexit
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent


def cpp_sources():
    """The C++ source tree: the sdist's cpp/, else the checkout's repository (None: neither)."""
    for root in (HERE / "cpp", HERE.parent):
        if (root / "CMakeLists.txt").is_file() and (root / "src" / "python" / "module.cc").is_file():
            return root
    return None


SOURCES = cpp_sources()
IN_CHECKOUT = SOURCES is not None and SOURCES == HERE.parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if SOURCES is None:
            raise RuntimeError(f"kvcodec's C++ sources are neither in {HERE / 'cpp'} (an sdist made by "
                               f"scripts/build_python_dist.sh carries them) nor in {HERE.parent} (a repository "
                               "checkout): build from the sdist or the repository")
        build_dir = os.environ.get("KVCODEC_CMAKE_BUILD_DIR")
        if build_dir:
            build_dir = pathlib.Path(build_dir).resolve()
        else:
            build_dir = pathlib.Path(self.build_temp).resolve() / "cmake"
            configure = ["cmake", "-S", str(SOURCES), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                         "-DKVCODEC_PYTHON_ONLY=ON", f"-DPython_EXECUTABLE={sys.executable}"]
            if shutil.which("ninja"):
                configure += ["-G", "Ninja"]
            configure += shlex.split(os.environ.get("KVCODEC_CMAKE_ARGS", ""))
            if not (build_dir / "CMakeCache.txt").is_file():
                self._run(configure)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        self._run(["cmake", "--build", str(build_dir), "--target", "_kvcodec", "-j", jobs])
        built = sorted((build_dir / "python" / "kvcodec").glob("_kvcodec*.so"))
        if not built:
            raise RuntimeError(f"the build made no _kvcodec module in {build_dir / 'python' / 'kvcodec'}")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built[-1], target)
        # A reused development build carries debug information (tens of MB) that an installed
        # package has no use for; a Release build has none and is left as it is.
        if shutil.which("strip"):
            self._run(["strip", "--strip-debug", str(target)])

    @staticmethod
    def _run(command):
        print("kvcodec:", " ".join(command), flush=True)
        subprocess.run(command, check=True)


options = {}
if IN_CHECKOUT and "sdist" in sys.argv:
    # An sdist made here would lack the C++ sources (they are outside this folder).
    sys.exit("kvcodec: make the sdist with scripts/build_python_dist.sh, which puts the C++ sources in it")
if IN_CHECKOUT:
    scratch = tempfile.mkdtemp(prefix="kvcodec-setup-")
    atexit.register(shutil.rmtree, scratch, True)
    options = {"build": {"build_base": os.path.join(scratch, "build")}, "egg_info": {"egg_base": scratch}}

setup(ext_modules=[Extension("kvcodec._kvcodec", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options=options)
