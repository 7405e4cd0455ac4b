"""The ONNX builder the zoo's models are written with: nodes and initializers named after their
layer, and the layers exporters emit (Conv + BatchNormalization, ReLU6 as Clip, Linear as Gemm)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # onnxruntime 1.31 refuses the IR version onnx 1.23 writes by default


class ModelBuilder:
    """Accumulates nodes and initializers; names every node and value after its layer."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def constant(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def normal(self, name: str, shape: Sequence[int], std: float) -> str:
        return self.constant(name, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def node(self, op: str, inputs: Sequence[str], name: str, outputs: int = 1, **attrs: Any) -> str:
        names = [name] if outputs == 1 else [f"{name}:{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, list(inputs), names, name=name, **attrs))
        return names[0]

    def model(self, name: str, inputs: Sequence[onnx.ValueInfoProto], outputs: Sequence[onnx.ValueInfoProto]) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, list(inputs), list(outputs), self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="autosched.zoo")
        model.ir_version = IR_VERSION
        return model

    # Layers -----------------------------------------------------------------

    def conv_bn(self, x: str, name: str, cin: int, cout: int, kernel: int, stride: int = 1, group: int = 1,
                gamma: tuple[float, float] = (0.5, 1.0), dilation: int = 1) -> str:
        """Conv without bias ("same" padding) followed by BatchNormalization, as PyTorch exports it."""
        fan_in = cin // group * kernel * kernel
        weight = self.normal(f"{name}.weight", (cout, cin // group, kernel, kernel), math.sqrt(2.0 / fan_in))
        y = self.node("Conv", [x, weight], f"{name}/Conv", kernel_shape=[kernel, kernel], strides=[stride, stride],
                      pads=[dilation * (kernel // 2)] * 4, group=group, dilations=[dilation, dilation])
        return self.batch_norm(y, f"{name}.bn", cout, gamma)

    def batch_norm(self, x: str, name: str, channels: int, gamma: tuple[float, float]) -> str:
        params = [
            self.constant(f"{name}.weight", self.rng.uniform(*gamma, channels).astype(np.float32)),
            self.constant(f"{name}.bias", (self.rng.standard_normal(channels) * 0.1).astype(np.float32)),
            self.constant(f"{name}.running_mean", (self.rng.standard_normal(channels) * 0.1).astype(np.float32)),
            self.constant(f"{name}.running_var", self.rng.uniform(0.5, 1.5, channels).astype(np.float32)),
        ]
        return self.node("BatchNormalization", [x, *params], f"{name}/BatchNormalization", epsilon=1e-5)

    def relu6(self, x: str, name: str) -> str:
        """ReLU6 as Clip with its own bound constants, duplicated per use like exporters do."""
        low = self.constant(f"{name}.min", np.array(0.0, np.float32))
        high = self.constant(f"{name}.max", np.array(6.0, np.float32))
        return self.node("Clip", [x, low, high], f"{name}/Clip")

    def linear(self, x: str, name: str, cin: int, cout: int, std: float | None = None) -> str:
        """A PyTorch Linear on a matrix: Gemm with transposed weight."""
        weight = self.normal(f"{name}.weight", (cout, cin), std if std is not None else math.sqrt(2.0 / cin))
        bias = self.normal(f"{name}.bias", (cout,), 0.01)
        return self.node("Gemm", [x, weight, bias], f"{name}/Gemm", transB=1)

    def dense(self, x: str, name: str, cin: int, cout: int, std: float) -> str:
        """A Linear on a 3-D activation: MatMul then bias Add."""
        weight = self.normal(f"{name}.weight", (cin, cout), std)
        bias = self.normal(f"{name}.bias", (cout,), 0.02)
        return self.node("Add", [self.node("MatMul", [x, weight], f"{name}/MatMul"), bias], f"{name}/Add")

    def layer_norm(self, x: str, name: str, hidden: int, epsilon: float = 1e-12) -> str:
        """LayerNormalization over the last axis, its scale near 1 and its bias near 0."""
        scale = self.constant(f"{name}.weight", (1.0 + self.rng.standard_normal(hidden) * 0.05).astype(np.float32))
        bias = self.constant(f"{name}.bias", (self.rng.standard_normal(hidden) * 0.05).astype(np.float32))
        return self.node("LayerNormalization", [x, scale, bias], f"{name}/LayerNormalization", axis=-1, epsilon=epsilon)

    def gelu(self, x: str, name: str) -> str:
        """GELU as x·½·(1 + erf(x/√2)), the chain PyTorch exports below opset 20."""
        scaled = self.node("Div", [x, self.constant(f"{name}.sqrt2", np.array(math.sqrt(2.0), np.float32))], f"{name}/Div")
        shifted = self.node("Add", [self.node("Erf", [scaled], f"{name}/Erf"),
                                    self.constant(f"{name}.one", np.array(1.0, np.float32))], f"{name}/Add")
        product = self.node("Mul", [x, shifted], f"{name}/Mul")
        return self.node("Mul", [product, self.constant(f"{name}.half", np.array(0.5, np.float32))], f"{name}/Mul_1")

    def classifier_head(self, x: str, channels: int, classes: int) -> str:
        pooled = self.node("GlobalAveragePool", [x], "avgpool/GlobalAveragePool")
        flat = self.node("Flatten", [pooled], "flatten/Flatten", axis=1)
        return self.linear(flat, "fc", channels, classes, std=math.sqrt(1.0 / channels))


def tensor_info(name: str, shape: Sequence[int], elem_type: int = TensorProto.FLOAT) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, list(shape))
