"""Runtime: loading compiled kernels and models and calling them on numpy arrays."""
from autosched.runtime.model import KernelCall, Model, ModelError, load_model
from autosched.runtime.module import Kernel, load_kernel

__all__ = ["Kernel", "KernelCall", "load_kernel", "Model", "ModelError", "load_model"]
