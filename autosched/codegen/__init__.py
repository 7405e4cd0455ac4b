"""Code generation: renderers of lowered kernels (a C-style base, the CPU's C, CUDA and its CPU
emulation) and the compilers that build their output. Which renderer and compiler a target
gets is its back end's record (`autosched.backend`)."""
from __future__ import annotations

from autosched.codegen.c import CRenderer
from autosched.codegen.cstyle import CStyleRenderer
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.cuda_emulate import EmulationRenderer
from autosched.codegen.errors import CodegenError, CompileError

__all__ = ["CRenderer", "CStyleRenderer", "CudaRenderer", "EmulationRenderer", "CodegenError", "CompileError"]
