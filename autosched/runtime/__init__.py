"""Runtime: loading compiled kernels and calling them on numpy arrays."""
from autosched.runtime.module import Kernel, load_kernel

__all__ = ["Kernel", "load_kernel"]
