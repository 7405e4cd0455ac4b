"""CNN blocks of shapes and ops the zoo's models lack, written to find what generalizes badly.

Each is a few layers of a family the zoo does not cover: VGG stacks, inception branches,
squeeze-excitation, dilated and 5×5 kernels, MobileNetV3's and EfficientNet's inverted residuals
(hard-swish, swish, 5×5 depthwise), DenseNet's pre-activation concatenations, 1-D convolutions,
an FPN's top-down path (nearest and bilinear Resize) and a U-Net decoder (ConvTranspose). At
2026-11-27 three of them did not import and four ran slower than onnxruntime untuned; the README
("Blocks no developer had seen") has the figures. `python benchmarks/models.py --models
se_block,fpn_block` builds and times them like the zoo's.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx

from autosched.zoo_builder import ModelBuilder, tensor_info


def vgg_small(seed: int = 1) -> onnx.ModelProto:
    """VGG-style 3x3 stacks (64, 128, 256 channels) with unpadded 2x2 max pools, on 112x112."""
    b, x, cin = ModelBuilder(seed), "input", 3
    for stage, (cout, layers) in enumerate(((64, 2), (128, 2), (256, 3))):
        for i in range(layers):
            x = b.node("Relu", [b.conv_bn(x, f"s{stage}.{i}", cin, cout, 3)], f"s{stage}.{i}/Relu")
            cin = cout
        x = b.node("MaxPool", [x], f"s{stage}/MaxPool", kernel_shape=[2, 2], strides=[2, 2])
    return b.model("vgg_small", [tensor_info("input", (1, 3, 112, 112))], [tensor_info(x, (1, 256, 14, 14))])


def inception_block(seed: int = 2) -> onnx.ModelProto:
    """1x1, 1x1 -> 3x3, 1x1 -> 5x5 and 3x3 average pool -> 1x1 branches of a 192-channel input, concatenated."""
    b, x, c = ModelBuilder(seed), "input", 192

    def branch(y: str, name: str, cin: int, cout: int, kernel: int) -> str:
        return b.node("Relu", [b.conv_bn(y, name, cin, cout, kernel)], f"{name}/Relu")

    pooled = b.node("AveragePool", [x], "b4/AveragePool", kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    y = b.node("Concat", [branch(x, "b1", c, 64, 1), branch(branch(x, "b2a", c, 96, 1), "b2b", 96, 128, 3),
                          branch(branch(x, "b3a", c, 16, 1), "b3b", 16, 32, 5), branch(pooled, "b4", c, 32, 1)],
               "cat/Concat", axis=1)
    return b.model("inception_block", [tensor_info("input", (1, c, 28, 28))], [tensor_info(y, (1, 256, 28, 28))])


def se_block(seed: int = 3) -> onnx.ModelProto:
    """Two SE-ResNet basic blocks of 128 channels at 28x28: the gate's scales come out of Gemms and a Reshape."""
    b, x, c = ModelBuilder(seed), "input", 128
    for i in range(2):
        y = b.conv_bn(b.node("Relu", [b.conv_bn(x, f"l{i}.c1", c, c, 3)], f"l{i}/r1"), f"l{i}.c2", c, c, 3)
        s = b.node("Flatten", [b.node("GlobalAveragePool", [y], f"l{i}/gap")], f"l{i}/flat", axis=1)
        s = b.node("Relu", [b.linear(s, f"l{i}.fc1", c, c // 16)], f"l{i}/fr")
        s = b.node("Sigmoid", [b.linear(s, f"l{i}.fc2", c // 16, c)], f"l{i}/sig")
        s = b.node("Reshape", [s, b.constant(f"l{i}.shape", np.array([1, c, 1, 1], np.int64))], f"l{i}/rs")
        x = b.node("Relu", [b.node("Add", [b.node("Mul", [y, s], f"l{i}/se"), x], f"l{i}/add")], f"l{i}/r2")
    return b.model("se_block", [tensor_info("input", (1, c, 28, 28))], [tensor_info(x, (1, c, 28, 28))])


def dilated_block(seed: int = 4) -> onnx.ModelProto:
    """A 3x3 convolution of dilation 2 on a 64-channel input, then a 5x5 of stride 2."""
    b = ModelBuilder(seed)
    w = b.normal("d.weight", (64, 64, 3, 3), 0.05)
    x = b.node("Relu", [b.node("Conv", ["input", w], "d/Conv", kernel_shape=[3, 3], pads=[2, 2, 2, 2],
                               dilations=[2, 2])], "d/Relu")
    w = b.normal("s.weight", (128, 64, 5, 5), 0.03)
    x = b.node("Relu", [b.node("Conv", [x, w], "s/Conv", kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[2, 2])],
               "s/Relu")
    return b.model("dilated_block", [tensor_info("input", (1, 64, 56, 56))], [tensor_info(x, (1, 128, 28, 28))])


def mbv3_block(seed: int = 5) -> onnx.ModelProto:
    """Two MobileNetV3-style inverted residuals: 1x1 expand and 5x5 depthwise with hard-swish, an
    SE gate of 1x1 convolutions with hard-sigmoid, a 1x1 projection, on 40 channels at 28x28."""
    b, x, c, e = ModelBuilder(seed), "input", 40, 120
    for i in range(2):
        y = b.node("HardSwish", [b.conv_bn(x, f"m{i}.exp", c, e, 1)], f"m{i}/hs1")
        y = b.node("HardSwish", [b.conv_bn(y, f"m{i}.dw", e, e, 5, group=e)], f"m{i}/hs2")
        s = b.node("GlobalAveragePool", [y], f"m{i}/gap")
        s = b.node("Relu", [b.node("Conv", [s, b.normal(f"m{i}.se1.w", (32, e, 1, 1), 0.1),
                                            b.normal(f"m{i}.se1.b", (32,), 0.01)], f"m{i}/se1")], f"m{i}/ser")
        s = b.node("HardSigmoid", [b.node("Conv", [s, b.normal(f"m{i}.se2.w", (e, 32, 1, 1), 0.1),
                                                   b.normal(f"m{i}.se2.b", (e,), 0.01)], f"m{i}/se2")],
                   f"m{i}/hsig", alpha=1 / 6, beta=0.5)
        x = b.node("Add", [x, b.conv_bn(b.node("Mul", [y, s], f"m{i}/se"), f"m{i}.proj", e, c, 1)], f"m{i}/add")
    return b.model("mbv3_block", [tensor_info("input", (1, c, 28, 28))], [tensor_info(x, (1, c, 28, 28))])


def effnet_block(seed: int = 6) -> onnx.ModelProto:
    """Two EfficientNet-style MBConvs with swish (x·sigmoid(x)): 24 -> 40 channels with a 3x3
    stride-2 depthwise, then 40 -> 40 with a 5x5 depthwise and the residual."""
    b = ModelBuilder(seed)

    def swish(x: str, name: str) -> str:
        return b.node("Mul", [x, b.node("Sigmoid", [x], f"{name}/sig")], f"{name}/swish")

    y = swish(b.conv_bn("input", "e.exp", 24, 144, 1), "e1")
    y = b.conv_bn(swish(b.conv_bn(y, "e.dw", 144, 144, 3, stride=2, group=144), "e2"), "e.proj", 144, 40, 1)
    z = swish(b.conv_bn(swish(b.conv_bn(y, "f.exp", 40, 240, 1), "f1"), "f.dw", 240, 240, 5, group=240), "f2")
    z = b.node("Add", [y, b.conv_bn(z, "f.proj", 240, 40, 1)], "f/add")
    return b.model("effnet_block", [tensor_info("input", (1, 24, 56, 56))], [tensor_info(z, (1, 40, 28, 28))])


def dense_block(seed: int = 7) -> onnx.ModelProto:
    """A DenseNet-style block: four BN-ReLU-1x1 (128) -> BN-ReLU-3x3 (32) layers, each output
    concatenated to the input of the next, on 64 channels at 28x28."""
    b, x, c, k = ModelBuilder(seed), "input", 64, 32
    for i in range(4):
        y = b.node("Relu", [b.batch_norm(x, f"d{i}.bn1", c, (0.5, 1.0))], f"d{i}/r1")
        y = b.node("Conv", [y, b.normal(f"d{i}.c1.w", (4 * k, c, 1, 1), math.sqrt(2 / c))], f"d{i}/c1",
                   kernel_shape=[1, 1])
        y = b.node("Relu", [b.batch_norm(y, f"d{i}.bn2", 4 * k, (0.5, 1.0))], f"d{i}/r2")
        y = b.node("Conv", [y, b.normal(f"d{i}.c2.w", (k, 4 * k, 3, 3), math.sqrt(2 / (36 * k)))], f"d{i}/c2",
                   kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        x, c = b.node("Concat", [x, y], f"d{i}/cat", axis=1), c + k
    return b.model("dense_block", [tensor_info("input", (1, 64, 28, 28))], [tensor_info(x, (1, c, 28, 28))])


def conv1d_stack(seed: int = 8) -> onnx.ModelProto:
    """Three 1-D convolutions with ReLUs (64 -> 128 -> 128 -> 256 channels, kernels 9, 9, 5) over 400 steps."""
    b, x, c = ModelBuilder(seed), "input", 64
    for i, (cout, k) in enumerate(((128, 9), (128, 9), (256, 5))):
        w, bias = b.normal(f"a{i}.w", (cout, c, k), math.sqrt(2 / (c * k))), b.normal(f"a{i}.b", (cout,), 0.01)
        x = b.node("Relu", [b.node("Conv", [x, w, bias], f"a{i}/Conv", kernel_shape=[k], pads=[k // 2, k // 2])],
                   f"a{i}/Relu")
        c = cout
    return b.model("conv1d_stack", [tensor_info("input", (1, 64, 400))], [tensor_info(x, (1, 256, 400))])


def fpn_block(seed: int = 10) -> onnx.ModelProto:
    """An FPN top-down path: lateral 1x1 convolutions of three levels (7x7, 14x14, 28x28), nearest
    2x upsampling (asymmetric, floor: PyTorch's export) and adds, a 3x3 smoothing, then a bilinear
    (half_pixel) 2x upsampling into a 3x3 head."""
    b = ModelBuilder(seed)

    def up(x: str, name: str, mode: str = "nearest") -> str:
        scales = b.constant(f"{name}.scales", np.array([1, 1, 2, 2], np.float32))
        return b.node("Resize", [x, "", scales], f"{name}/Resize", mode=mode, nearest_mode="floor",
                      coordinate_transformation_mode="asymmetric" if mode == "nearest" else "half_pixel")

    p5 = b.conv_bn("c5", "l5", 512, 128, 1)
    p4 = b.node("Add", [b.conv_bn("c4", "l4", 256, 128, 1), up(p5, "u5")], "p4/Add")
    p3 = b.node("Add", [b.conv_bn("c3", "l3", 128, 128, 1), up(p4, "u4")], "p3/Add")
    o3 = b.node("Relu", [b.conv_bn(p3, "s3", 128, 128, 3)], "s3/Relu")
    y = b.node("Relu", [b.conv_bn(up(o3, "head", "linear"), "head", 128, 64, 3)], "head/Relu")
    return b.model("fpn_block", [tensor_info("c5", (1, 512, 7, 7)), tensor_info("c4", (1, 256, 14, 14)),
                                 tensor_info("c3", (1, 128, 28, 28))], [tensor_info(y, (1, 64, 56, 56))])


def unet_decoder(seed: int = 9) -> onnx.ModelProto:
    """A U-Net decoder block: a 2x2 stride-2 ConvTranspose of 128 channels at 28x28 and a nearest
    Resize of the same input, concatenated with a 64-channel skip, then a 3x3 convolution."""
    b = ModelBuilder(seed)
    up = b.node("ConvTranspose", ["input", b.normal("up.w", (128, 64, 2, 2), 0.1)], "up/ConvTranspose",
                kernel_shape=[2, 2], strides=[2, 2])
    resized = b.node("Resize", ["input", "", b.constant("scales", np.array([1, 1, 2, 2], np.float32))], "rs/Resize",
                     mode="nearest")
    cat = b.node("Concat", [up, resized, "skip"], "cat/Concat", axis=1)
    y = b.node("Relu", [b.conv_bn(cat, "dec", 64 + 128 + 64, 64, 3)], "dec/Relu")
    return b.model("unet_decoder", [tensor_info("input", (1, 128, 28, 28)), tensor_info("skip", (1, 64, 56, 56))],
                   [tensor_info(y, (1, 64, 56, 56))])


BLOCKS: dict[str, Callable[[], onnx.ModelProto]] = {
    "vgg_small": vgg_small,
    "inception_block": inception_block,
    "se_block": se_block,
    "dilated_block": dilated_block,
    "mbv3_block": mbv3_block,
    "effnet_block": effnet_block,
    "dense_block": dense_block,
    "conv1d_stack": conv1d_stack,
    "fpn_block": fpn_block,
    "unet_decoder": unet_decoder,
}
