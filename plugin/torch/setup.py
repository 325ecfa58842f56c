"""Builds sharc (the C++ library, with CMake) and its torch extension against the torch of the
Python running this, and installs the `sharc` package:

    pip install --no-build-isolation ./plugin/torch

Build requirements (no PyPI needed): torch with its headers, setuptools, CMake >= 3.25, a C++20
compiler, pkg-config, libfabric and hwloc development files. SHARC_JOBS sets the build's
parallelism (default: the number of CPUs).

CUDA tensors: with a CUDA torch and the CUDA toolkit's headers (CUDA_HOME, $CUDACXX's or nvcc's
toolkit, /usr/local/cuda), the extension is compiled against torch's c10::cuda API
(SHARC_TORCH_CUDA=1); otherwise it uses only torch's device-generic APIs and finds the one
CUDA-specific function it needs in libc10_cuda at run time. libsharc runs the stream-ordered
collectives only when built with CUDA. With a torch
that has CUDA, libsharc is built with CUDA when CMake finds nvcc (on PATH, $CUDACXX, or torch's
CUDA_HOME); with a CPU-only torch it is built without. SHARC_WITH_CUDA=ON/OFF overrides both.
"""
import os
import pathlib
import shutil
import subprocess

from setuptools import setup
import torch
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SOURCES = ["backend.cc", "backend_lifecycle.cc", "backend_p2p.cc", "cuda_work.cc", "launch.cc", "module.cc",
           "plan_binding.cc", "tensor_args.cc", "work.cc"]


def _cuda_configure():
    """CMake arguments and environment for libsharc's CUDA choice (see the module docstring);
    always explicit, so that a cached build directory follows the choice of this build."""
    env = dict(os.environ)
    choice = os.environ.get("SHARC_WITH_CUDA", "").strip().upper()
    if choice in ("0", "OFF", "NO", "FALSE") or (not choice and torch.version.cuda is None):
        return ["-DSHARC_WITH_CUDA=OFF"], env
    if not env.get("CUDACXX") and not shutil.which("nvcc"):
        from torch.utils.cpp_extension import CUDA_HOME
        nvcc = pathlib.Path(CUDA_HOME or "/usr/local/cuda") / "bin" / "nvcc"
        if nvcc.exists():
            env["CUDACXX"] = str(nvcc)
    if choice or env.get("CUDACXX") or shutil.which("nvcc"):
        return ["-DSHARC_WITH_CUDA=ON"], env
    print("sharc: torch has CUDA but no nvcc was found: libsharc is built without CUDA, and "
          "collectives on CUDA tensors will fail (set CUDACXX or put nvcc on PATH)")
    return ["-DSHARC_WITH_CUDA=OFF"], env


def _torch_cuda_compile_args():
    """(include dirs, macros, libraries) for compiling against torch's c10::cuda API: only
    with a CUDA torch and the toolkit's headers at hand (SHARC_WITH_CUDA=OFF turns it off)."""
    choice = os.environ.get("SHARC_WITH_CUDA", "").strip().upper()
    if torch.version.cuda is None or choice in ("0", "OFF", "NO", "FALSE"):
        return [], [("SHARC_TORCH_CUDA", "0")], []
    from torch.utils.cpp_extension import CUDA_HOME
    candidates = [CUDA_HOME, "/usr/local/cuda"]
    nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc")
    if nvcc:
        candidates.insert(0, str(pathlib.Path(nvcc).resolve().parent.parent))
    for home in filter(None, candidates):
        include = pathlib.Path(home) / "include"
        if (include / "cuda_runtime_api.h").exists():
            return [str(include)], [("SHARC_TORCH_CUDA", "1")], ["c10_cuda"]
    print("sharc: torch has CUDA but the CUDA toolkit's headers were not found: the extension "
          "looks torch's CUDA stream API up at run time instead")
    return [], [("SHARC_TORCH_CUDA", "0")], []


CUDA_INCLUDES, CUDA_MACROS, CUDA_LIBRARIES = _torch_cuda_compile_args()


class BuildWithSharc(BuildExtension):
    """Builds libsharc first, links the extension to it, and ships it in sharc/lib."""

    def build_extensions(self):
        core = pathlib.Path(self.build_temp).resolve() / "sharc-core"
        jobs = os.environ.get("SHARC_JOBS", str(os.cpu_count() or 2))
        configure = ["cmake", "-S", str(ROOT), "-B", str(core), "-DCMAKE_BUILD_TYPE=Release",
                     "-DSHARC_BUILD_TESTS=OFF", "-DSHARC_BUILD_BENCHMARKS=OFF",
                     "-DSHARC_WITH_MPI=OFF"]
        cuda_args, env = _cuda_configure()
        configure += cuda_args
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure, env=env)
        subprocess.check_call(["cmake", "--build", str(core), "--target", "sharc", "sharc_plan",
                               "-j", jobs], env=env)
        libdirs = {"libsharc.so.0": core / "src" / "api",
                   "libsharc_plan.so.0": core / "src" / "plan"}
        for ext in self.extensions:
            ext.library_dirs.extend(str(d) for d in libdirs.values())
        super().build_extensions()
        # The extension finds libsharc and libsharc_plan next to itself (rpath $ORIGIN/lib).
        self._ship_libsharc(pathlib.Path(self.build_lib) / "sharc" / "lib", libdirs)
        self._libdirs = libdirs

    def run(self):
        inplace = self.inplace or getattr(self, "editable_mode", False)
        super().run()  # builds into build_lib, then copies the extension if in place
        if inplace:
            self._ship_libsharc(HERE / "sharc" / "lib", self._libdirs)

    @staticmethod
    def _ship_libsharc(dest, libdirs):
        dest.mkdir(parents=True, exist_ok=True)
        for soname, libdir in libdirs.items():
            shutil.copy2((libdir / soname).resolve(), dest / soname)


setup(
    name="sharc",
    version="0.1.0",
    description="sharc: sharded-training collectives (torch.distributed backend \"sharc\")",
    packages=["sharc", "sharc.torch"],
    package_data={"sharc": ["lib/libsharc.so.0", "lib/libsharc_plan.so.0"]},
    ext_modules=[
        CppExtension(
            name="sharc._C",
            sources=[f"csrc/{s}" for s in SOURCES],
            include_dirs=[str(ROOT / "include"), str(HERE / "csrc")],
            define_macros=CUDA_MACROS,
            libraries=["sharc", "sharc_plan", "dl"] + CUDA_LIBRARIES,
            # torch's headers as system headers: -Wall -Wextra then speak of sharc's code only.
            extra_compile_args=["-std=c++20", "-Wall", "-Wextra", "-O2"]
            + [f"-isystem{p}" for p in include_paths() + CUDA_INCLUDES],
            extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
        )
    ],
    cmdclass={"build_ext": BuildWithSharc},
    python_requires=">=3.9",
)
