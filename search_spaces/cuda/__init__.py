"""GPU templates (target kind "cuda"), registered by ONNX op name when this package is imported."""
from autosched.compute import BY_LANES, ELEMENTWISE, OTHERS
from autosched.templates import register
from search_spaces.cuda import conv2d, matmul, pointwise

register("MatMul", "cuda", matmul.TEMPLATE)
register("Gemm", "cuda", matmul.TEMPLATE)
register("Conv", "cuda", conv2d.TEMPLATE)
for _op in sorted(set(ELEMENTWISE) | set(OTHERS) | set(BY_LANES)):
    register(_op, "cuda", pointwise.TEMPLATE)
