"""CPU templates (target kind "llvm"), registered by ONNX op name when this package is imported."""
from autosched.templates import register
from search_spaces.llvm import conv2d, conv2d_nchwc, integer_conv, integer_matmul, matmul

register("MatMul", "llvm", matmul.TEMPLATE)
register("Gemm", "llvm", matmul.TEMPLATE)
register("IntegerMatMul", "llvm", integer_matmul.TEMPLATE)
register("IntegerConvNCHWc", "llvm", integer_conv.TEMPLATE)
register("Conv", "llvm", conv2d.TEMPLATE)
register("ConvNCHWc", "llvm", conv2d_nchwc.TEMPLATE)
