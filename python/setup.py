"""Builds kvcodec._kvcodec with CMake (the repository one folder up) for pip.

By default a Release build of only what the extension needs (KVCODEC_PYTHON_ONLY: no llama.cpp)
in <repo>/build/python. KVCODEC_CMAKE_BUILD_DIR names an already configured build of the
repository to take the extension from instead (the test suite reuses its dev build so).
KVCODEC_CMAKE_ARGS adds configure arguments.
"""

import os
import pathlib
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        if not (REPO / "CMakeLists.txt").is_file():
            raise RuntimeError(f"kvcodec's sources are not beside this package ({REPO}): install from the repository")
        build_dir = os.environ.get("KVCODEC_CMAKE_BUILD_DIR")
        if build_dir:
            build_dir = pathlib.Path(build_dir).resolve()
        else:
            build_dir = REPO / "build" / "python"
            configure = ["cmake", "-S", str(REPO), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
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

    @staticmethod
    def _run(command):
        print("kvcodec:", " ".join(command), flush=True)
        subprocess.run(command, check=True)


setup(ext_modules=[Extension("kvcodec._kvcodec", sources=[])], cmdclass={"build_ext": CMakeBuild})
