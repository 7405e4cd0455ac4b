"""GPU templates (target kind "cuda"), registered by ONNX op name when this package is imported."""
from search_spaces.cuda import matmul
from search_spaces.registry import register

register("MatMul", "cuda", matmul.TEMPLATE)
register("Gemm", "cuda", matmul.TEMPLATE)
