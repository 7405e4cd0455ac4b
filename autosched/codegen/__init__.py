"""Code generation: one renderer per target kind, chosen from one registry."""
from __future__ import annotations

from autosched.codegen.c import CRenderer
from autosched.codegen.cuda import CudaRenderer
from autosched.codegen.cuda_emulate import EmulationRenderer
from autosched.codegen.errors import CodegenError, CompileError

#: target kind -> renderer class; a new back end is one module and one line here
RENDERERS = {"llvm": CRenderer, "c": CRenderer, "cuda": CudaRenderer, "cuda-emulate": EmulationRenderer}


def renderer_for(kind: str):
    try:
        return RENDERERS[kind]()
    except KeyError:
        raise CodegenError(f"no code generator for target {kind!r}; known: {', '.join(sorted(RENDERERS))}") from None


__all__ = ["RENDERERS", "renderer_for", "CRenderer", "CudaRenderer", "EmulationRenderer", "CodegenError", "CompileError"]
