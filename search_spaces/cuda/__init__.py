"""GPU templates (target kind "cuda"), registered by ONNX op name when this package is imported."""
from autosched.opset.record import OpKind
from autosched.opset.registry import OPS
from autosched.templates import register
from search_spaces.cuda import conv2d, matmul, pointwise

register("MatMul", "cuda", matmul.TEMPLATE)
register("Gemm", "cuda", matmul.TEMPLATE)
register("Conv", "cuda", conv2d.TEMPLATE)
for _op in sorted(op.value for op, record in OPS.items() if record.kind is not OpKind.ANCHOR):
    register(_op, "cuda", pointwise.TEMPLATE)
