"""Builds libtwellrt with CMake from the enclosing checkout (or takes a prebuilt one from
$TWELL_PREBUILT_LIB) and places it inside the package with what it needs at run time: the Lua
runtime it links (so no system Lua is needed) and the kernel templates, in the layout the library
searches (<libdir>/../share/twellrt/templates)."""

import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
# The repository the library and templates come from (overridable for builds from a copy).
ROOT = os.environ.get("TWELL_SOURCE_DIR") or os.path.dirname(HERE)


def _build_library() -> str:
    prebuilt = os.environ.get("TWELL_PREBUILT_LIB")
    if prebuilt:
        return prebuilt
    if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
        raise RuntimeError("twellrt: build from a twellrt checkout (python/ inside the repository)")
    b = os.path.join(ROOT, "build-python")
    subprocess.check_call(["sh", os.path.join(ROOT, "scripts", "deps.sh")])
    subprocess.check_call(
        ["cmake", "-S", ROOT, "-B", b, "-DCMAKE_BUILD_TYPE=Release", "-DTWELL_BUILD_TESTS=OFF"]
    )
    subprocess.check_call(["cmake", "--build", b, "--target", "twellrt", "-j", str(os.cpu_count() or 2)])
    return os.path.join(b, "libtwellrt.so")


def _soname() -> str:
    """libtwellrt.so.N, N the header's TWELL_ABI_VERSION (what twellrt/_lib.py loads)."""
    with open(os.path.join(ROOT, "runtime", "twellrt.h")) as f:
        m = re.search(r"^#define TWELL_ABI_VERSION (\d+)$", f.read(), re.M)
    if not m:
        raise RuntimeError("twellrt: runtime/twellrt.h defines no TWELL_ABI_VERSION")
    return f"libtwellrt.so.{m.group(1)}"


def _lua_of(lib: str) -> str:
    out = subprocess.check_output(["ldd", lib], text=True)
    m = re.search(r"liblua5\.4\.so\.0 => (\S+)", out)
    if not m:
        raise RuntimeError(f"twellrt: cannot find the Lua library {lib} links against:\n{out}")
    return m.group(1)


class BuildPy(build_py):
    def run(self):
        super().run()
        pkg = os.path.join(self.build_lib, "twellrt")
        libdir = os.path.join(pkg, "lib")
        tpl = os.path.join(pkg, "share", "twellrt", "templates")
        os.makedirs(libdir, exist_ok=True)
        lib = _build_library()
        shutil.copyfile(os.path.realpath(lib), os.path.join(libdir, _soname()))
        shutil.copyfile(os.path.realpath(_lua_of(lib)), os.path.join(libdir, "liblua5.4.so.0"))
        if os.path.isdir(tpl):
            shutil.rmtree(tpl)
        shutil.copytree(
            os.path.join(ROOT, "templates"), tpl, ignore=shutil.ignore_patterns("*.md", "*~")
        )


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the wheel carries a native library: tag it for this platform
        return True


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
