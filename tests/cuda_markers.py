"""Which CUDA tests this machine can run: nvcc for builds, a GPU (seen by nvidia-smi) for runs."""
import shutil

import pytest

from autosched.target import detect_cuda_arch

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed")
no_gpu_here = pytest.mark.skipif(detect_cuda_arch() is not None, reason="this machine has a GPU")
needs_gpu = pytest.mark.skipif(detect_cuda_arch() is None, reason="no NVIDIA GPU (nvidia-smi) on this machine")
#: both architectures the CUDA back end targets; Hopper's twin of each Ampere case is a long case
#: (the default suite compiles and reads the SASS of one, `-m slow` of both)
ARCHS = ["sm_80", pytest.param("sm_90", marks=pytest.mark.slow)]
