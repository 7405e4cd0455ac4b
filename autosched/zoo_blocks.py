"""CNN blocks of shapes and ops the zoo's models lack, written to find what generalizes badly.

Each is a few layers of a family the zoo does not cover: VGG stacks, inception branches,
squeeze-excitation, dilated and 5×5 kernels, MobileNetV3's and EfficientNet's inverted residuals
(hard-swish, swish, 5×5 depthwise), DenseNet's pre-activation concatenations, 1-D convolutions,
an FPN's top-down path (nearest and bilinear Resize), a U-Net decoder (ConvTranspose), and since
2026-11-29 ConvNeXt (7×7 depthwise, channels-last MLP), ShuffleNetV2 (split, 58-channel
convolutions, channel shuffle), a YOLO-style C3 + SPPF neck and MLP-Mixer, and a DCGAN generator
(strided 4x4 ConvTranspose) and RegNet (groups of 8 in 104 channels), and since 2026-12-01 Swin
(window attention over 49 tokens, shifted windows with their mask), and since 2026-12-05
DeepLab-v3's dilated bottlenecks on odd-sized maps and its ASPP head. At 2026-11-27 three of
them did not import and four ran slower than onnxruntime untuned; at 2026-11-29 ShuffleNetV2's
units took 1.8x onnxruntime's time, RegNet crashed the layout planner and the DCGAN generator
took 3.6x. The README ("Blocks no developer had seen") has the figures. `python benchmarks/models.py --models
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


def convnext_block(seed: int = 11, c: int = 96, side: int = 56) -> onnx.ModelProto:
    """Two ConvNeXt blocks: a 7x7 depthwise convolution, a permute to channels-last, LayerNorm,
    a 4x-wide MLP with GELU (MatMuls on 4-D activations), layer scale, and back, on 96 channels at 56x56."""
    b, x = ModelBuilder(seed), "input"
    for i in range(2):
        y = b.node("Conv", [x, b.normal(f"b{i}.dw.w", (c, 1, 7, 7), 0.1), b.normal(f"b{i}.dw.b", (c,), 0.01)],
                   f"b{i}/dw", kernel_shape=[7, 7], pads=[3, 3, 3, 3], group=c)
        y = b.layer_norm(b.node("Transpose", [y], f"b{i}/perm", perm=[0, 2, 3, 1]), f"b{i}.ln", c, epsilon=1e-6)
        y = b.dense(b.gelu(b.dense(y, f"b{i}.pw1", c, 4 * c, math.sqrt(1 / c)), f"b{i}.gelu"), f"b{i}.pw2", 4 * c, c,
                    math.sqrt(1 / (4 * c)))
        y = b.node("Mul", [y, b.constant(f"b{i}.gamma", np.full(c, 0.5, np.float32))], f"b{i}/scale")
        x = b.node("Add", [x, b.node("Transpose", [y], f"b{i}/unperm", perm=[0, 3, 1, 2])], f"b{i}/add")
    return b.model("convnext_block", [tensor_info("input", (1, c, side, side))], [tensor_info(x, (1, c, side, side))])


def shufflenet_block(seed: int = 12, c: int = 116, side: int = 28) -> onnx.ModelProto:
    """Three ShuffleNetV2 units of 116 channels at 28x28: a Split in halves, 1x1 -> 3x3
    depthwise -> 1x1 on one half (58 channels, no whole vector), a Concat, and the channel
    shuffle as Reshape -> Transpose -> Reshape."""
    b, x, half = ModelBuilder(seed), "input", c // 2
    for i in range(3):
        left = b.node("Split", [x, b.constant(f"u{i}.split", np.array([half, half], np.int64))], f"u{i}/split",
                      outputs=2, axis=1)
        y = b.node("Relu", [b.conv_bn(f"u{i}/split:1", f"u{i}.c1", half, half, 1)], f"u{i}/r1")
        y = b.node("Relu", [b.conv_bn(b.conv_bn(y, f"u{i}.dw", half, half, 3, group=half), f"u{i}.c2", half, half, 1)],
                   f"u{i}/r2")
        y = b.node("Reshape", [b.node("Concat", [left, y], f"u{i}/cat", axis=1),
                               b.constant(f"u{i}.groups", np.array([1, 2, half, side, side], np.int64))], f"u{i}/rs1")
        x = b.node("Reshape", [b.node("Transpose", [y], f"u{i}/shuffle", perm=[0, 2, 1, 3, 4]),
                               b.constant(f"u{i}.shape", np.array([1, c, side, side], np.int64))], f"u{i}/rs2")
    return b.model("shufflenet_block", [tensor_info("input", (1, c, side, side))], [tensor_info(x, (1, c, side, side))])


def csp_block(seed: int = 13, c: int = 128, side: int = 40) -> onnx.ModelProto:
    """A YOLOv5-style neck: a C3 block (two 1x1 branches, two residual bottlenecks on one,
    concatenated, 1x1), SPPF (three chained 5x5 stride-1 max pools, concatenated) and a nearest
    2x upsample, every convolution followed by SiLU (x·sigmoid(x)); 128 channels at 40x40."""
    b = ModelBuilder(seed)

    def conv_silu(x: str, name: str, cin: int, cout: int, kernel: int) -> str:
        y = b.conv_bn(x, name, cin, cout, kernel)
        return b.node("Mul", [y, b.node("Sigmoid", [y], f"{name}/sig")], f"{name}/silu")

    a = conv_silu("input", "c3.cv1", c, c // 2, 1)
    for i in range(2):
        inner = conv_silu(conv_silu(a, f"c3.m{i}.cv1", c // 2, c // 2, 1), f"c3.m{i}.cv2", c // 2, c // 2, 3)
        a = b.node("Add", [a, inner], f"c3.m{i}/add")
    x = conv_silu(b.node("Concat", [a, conv_silu("input", "c3.cv2", c, c // 2, 1)], "c3/cat", axis=1), "c3.cv3", c, c, 1)
    pooled = [conv_silu(x, "sppf.cv1", c, c // 2, 1)]
    for i in range(3):
        pooled.append(b.node("MaxPool", [pooled[-1]], f"sppf/pool{i}", kernel_shape=[5, 5], strides=[1, 1],
                             pads=[2, 2, 2, 2]))
    y = conv_silu(b.node("Concat", pooled, "sppf/cat", axis=1), "sppf.cv2", 2 * c, c, 1)
    y = b.node("Resize", [y, "", b.constant("scales", np.array([1, 1, 2, 2], np.float32))], "up/Resize", mode="nearest")
    return b.model("csp_block", [tensor_info("input", (1, c, side, side))], [tensor_info(y, (1, c, 2 * side, 2 * side))])


def mixer_block(seed: int = 14, tokens: int = 196, c: int = 512) -> onnx.ModelProto:
    """Two MLP-Mixer layers (Mixer-B/16's widths: 196 tokens of 512 channels, token MLP 256,
    channel MLP 2048): LayerNorm, a transpose and a token-mixing MLP, then a channel-mixing MLP,
    each with GELU and a residual."""
    b, x = ModelBuilder(seed), "input"
    for i in range(2):
        t = b.node("Transpose", [b.layer_norm(x, f"l{i}.ln1", c, epsilon=1e-6)], f"l{i}/t1", perm=[0, 2, 1])
        t = b.dense(b.gelu(b.dense(t, f"l{i}.tok1", tokens, 256, 0.07), f"l{i}.g1"), f"l{i}.tok2", 256, tokens, 0.06)
        x = b.node("Add", [x, b.node("Transpose", [t], f"l{i}/t2", perm=[0, 2, 1])], f"l{i}/res1")
        h = b.dense(b.gelu(b.dense(b.layer_norm(x, f"l{i}.ln2", c, epsilon=1e-6), f"l{i}.ch1", c, 2048, 0.04), f"l{i}.g2"),
                    f"l{i}.ch2", 2048, c, 0.02)
        x = b.node("Add", [x, h], f"l{i}/res2")
    return b.model("mixer_block", [tensor_info("input", (1, tokens, c))], [tensor_info(x, (1, tokens, c))])


def dcgan_generator(seed: int = 15) -> onnx.ModelProto:
    """A DCGAN generator: 4x4 ConvTransposes from a 100-value code (stride 1 on its 1x1 input,
    then stride 2, padding 1) to 512, 256, 128, 64 channels and a 64x64 RGB image, BatchNorm +
    ReLU between them, Tanh at the end."""
    b, x, cin = ModelBuilder(seed), "z", 100
    for i, (cout, stride, pad) in enumerate(((512, 1, 0), (256, 2, 1), (128, 2, 1), (64, 2, 1), (3, 2, 1))):
        w = b.normal(f"g{i}.weight", (cin, cout, 4, 4), math.sqrt(1 / (cin * 4)))
        x = b.node("ConvTranspose", [x, w], f"g{i}/ConvTranspose", kernel_shape=[4, 4], strides=[stride, stride],
                   pads=[pad] * 4)
        x = (b.node("Relu", [b.batch_norm(x, f"g{i}.bn", cout, (0.5, 1.0))], f"g{i}/Relu") if cout != 3
             else b.node("Tanh", [x], "out/Tanh"))
        cin = cout
    return b.model("dcgan_generator", [tensor_info("z", (1, 100, 1, 1))], [tensor_info(x, (1, 3, 64, 64))])


def regnet_block(seed: int = 16) -> onnx.ModelProto:
    """RegNetY-400MF-style stages: bottlenecks of width 104 (13 groups of 8) at 28x28, then 208 at
    14x14, each with a squeeze-excitation gate of 1x1 convolutions; a 48-channel input at 56x56."""
    b, x, cin = ModelBuilder(seed), "input", 48
    for i, (w, stride) in enumerate(((104, 2), (104, 1), (208, 2), (208, 1))):
        y = b.node("Relu", [b.conv_bn(x, f"b{i}.a", cin, w, 1)], f"b{i}/Relu_a")
        y = b.node("Relu", [b.conv_bn(y, f"b{i}.b", w, w, 3, stride=stride, group=w // 8)], f"b{i}/Relu_b")
        s = b.node("GlobalAveragePool", [y], f"b{i}/gap")
        s = b.node("Relu", [b.node("Conv", [s, b.normal(f"b{i}.se1.w", (cin // 4, w, 1, 1), 0.1),
                                            b.normal(f"b{i}.se1.b", (cin // 4,), 0.01)], f"b{i}/se1")], f"b{i}/se_r")
        s = b.node("Sigmoid", [b.node("Conv", [s, b.normal(f"b{i}.se2.w", (w, cin // 4, 1, 1), 0.1),
                                               b.normal(f"b{i}.se2.b", (w,), 0.01)], f"b{i}/se2")], f"b{i}/se_s")
        y = b.conv_bn(b.node("Mul", [y, s], f"b{i}/se"), f"b{i}.c", w, w, 1)
        shortcut = x if cin == w and stride == 1 else b.conv_bn(x, f"b{i}.proj", cin, w, 1, stride=stride)
        x, cin = b.node("Relu", [b.node("Add", [y, shortcut], f"b{i}/add")], f"b{i}/Relu_c"), w
    return b.model("regnet_block", [tensor_info("input", (1, 48, 56, 56))], [tensor_info(x, (1, 208, 14, 14))])


def resnest_block(seed: int = 19) -> onnx.ModelProto:
    """Two ResNeSt-style split-attention bottlenecks (radix 2, cardinality 1): a 3x3 convolution
    in 2 groups whose halves are summed, pooled and turned into per-channel weights by two 1x1
    convolutions and a softmax over the radix, then weigh the halves; the second bottleneck
    downsamples by an average pool after its attention (ResNeSt's "avd"). Groups of 32 and 64
    channels in, 64 and 128 out, on 56x56 and 28x28 maps."""
    b, x, cin = ModelBuilder(seed), "input", 64
    for i, (w, pool) in enumerate(((64, False), (128, True))):
        y = b.node("Relu", [b.conv_bn(x, f"b{i}.a", cin, w, 1)], f"b{i}/Relu_a")
        y = b.node("Relu", [b.conv_bn(y, f"b{i}.split", w, 2 * w, 3, group=2)], f"b{i}/Relu_split")
        halves = b.node("Split", [y], f"b{i}/halves", outputs=2, axis=1)
        gap = b.node("GlobalAveragePool", [b.node("Add", [halves, f"{halves[:-2]}:1"], f"b{i}/sum")], f"b{i}/gap")
        inter = max(w // 2, 32)
        s = b.node("Relu", [b.conv_bn(gap, f"b{i}.fc1", w, inter, 1)], f"b{i}/Relu_fc1")
        s = b.node("Conv", [s, b.normal(f"b{i}.fc2.w", (2 * w, inter, 1, 1), 0.1),
                            b.normal(f"b{i}.fc2.b", (2 * w,), 0.01)], f"b{i}/fc2")
        radix = b.constant(f"b{i}.radix_shape", np.array([1, 2, w], np.int64))
        s = b.node("Softmax", [b.node("Reshape", [s, radix], f"b{i}/radix")], f"b{i}/rsoftmax", axis=1)
        s = b.node("Reshape", [s, b.constant(f"b{i}.gate_shape", np.array([1, 2 * w, 1, 1], np.int64))], f"b{i}/gates")
        gates = b.node("Split", [s], f"b{i}/gate_halves", outputs=2, axis=1)
        y = b.node("Add", [b.node("Mul", [halves, gates], f"b{i}/weigh0"),
                           b.node("Mul", [f"{halves[:-2]}:1", f"{gates[:-2]}:1"], f"b{i}/weigh1")], f"b{i}/attended")
        if pool:
            y = b.node("AveragePool", [y], f"b{i}/avd", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
            shortcut = b.conv_bn(b.node("AveragePool", [x], f"b{i}/down", kernel_shape=[2, 2], strides=[2, 2]),
                                 f"b{i}.proj", cin, 4 * w, 1)
        else:
            shortcut = b.conv_bn(x, f"b{i}.proj", cin, 4 * w, 1)
        y = b.conv_bn(y, f"b{i}.c", w, 4 * w, 1)
        x, cin = b.node("Relu", [b.node("Add", [y, shortcut], f"b{i}/add")], f"b{i}/Relu_c"), 4 * w
    return b.model("resnest_block", [tensor_info("input", (1, 64, 56, 56))], [tensor_info(x, (1, 512, 28, 28))])


def hrnet_stage(seed: int = 20) -> onnx.ModelProto:
    """HRNet-W18's second stage: branches of 18 channels at 56x56 and 36 at 28x28, two BasicBlocks
    each, then the exchange (the low branch projected by a 1x1 conv and upsampled by a nearest
    Resize into the high one, the high one downsampled by a strided 3x3 conv into the low one).
    Channel counts no vector divides: layout planning leaves these convolutions plain."""
    b, xs, chans = ModelBuilder(seed), ["x0", "x1"], (18, 36)
    for br, c in enumerate(chans):
        x = xs[br]
        for k in range(2):
            y = b.node("Relu", [b.conv_bn(x, f"b{br}.{k}.a", c, c, 3)], f"b{br}.{k}/Relu_a")
            y = b.conv_bn(y, f"b{br}.{k}.b", c, c, 3)
            x = b.node("Relu", [b.node("Add", [y, x], f"b{br}.{k}/add")], f"b{br}.{k}/Relu_b")
        xs[br] = x
    scales = b.constant("up.scales", np.array([1, 1, 2, 2], np.float32))
    up = b.node("Resize", [b.conv_bn(xs[1], "f10", 36, 18, 1), "", scales], "up", mode="nearest")
    high = b.node("Relu", [b.node("Add", [xs[0], up], "fuse0")], "fuse0/Relu")
    low = b.node("Relu", [b.node("Add", [xs[1], b.conv_bn(xs[0], "f01", 18, 36, 3, stride=2)], "fuse1")], "fuse1/Relu")
    return b.model("hrnet_stage", [tensor_info("x0", (1, 18, 56, 56)), tensor_info("x1", (1, 36, 28, 28))],
                   [tensor_info(high, (1, 18, 56, 56)), tensor_info(low, (1, 36, 28, 28))])


def res2net_block(seed: int = 21) -> onnx.ModelProto:
    """A Res2Net-50 (26w x 4s) bottleneck at 56x56: the 1x1 reduction's 104 channels split into
    four of 26, three of them through 3x3 convolutions each fed the previous one's output added
    to its split (hierarchical residuals), concatenated with the fourth, then the 1x1 expansion."""
    b, x = ModelBuilder(seed), "input"
    y = b.node("Relu", [b.conv_bn(x, "a", 256, 104, 1)], "a/Relu")
    b.node("Split", [y], "split", outputs=4, axis=1)
    parts, outs, prev = [f"split:{i}" for i in range(4)], [], None
    for i in range(3):
        source = parts[i] if prev is None else b.node("Add", [parts[i], prev], f"s{i}/add")
        prev = b.node("Relu", [b.conv_bn(source, f"s{i}", 26, 26, 3)], f"s{i}/Relu")
        outs.append(prev)
    y = b.conv_bn(b.node("Concat", [*outs, parts[3]], "cat", axis=1), "c", 104, 256, 1)
    x = b.node("Relu", [b.node("Add", [y, x], "res")], "out")
    return b.model("res2net_block", [tensor_info("input", (1, 256, 56, 56))], [tensor_info(x, (1, 256, 56, 56))])


def swin_block(seed: int = 17, side: int = 56, c: int = 96, heads: int = 3, window: int = 7) -> onnx.ModelProto:
    """Two Swin-T stage-1 blocks (56x56 tokens of 96 channels, 3 heads): window partition and
    reverse as Reshape/Transpose chains, attention inside 7x7 windows (64 windows of 49 tokens, a
    length no vector divides) with a relative position bias gathered from its table, and in the
    second block the windows shifted by a Slice/Concat roll (as torch.roll exports) with the
    additive mask of the shifted regions; pre-LayerNorm, a 4x-wide GELU MLP."""
    b, x = ModelBuilder(seed), "input"
    n, nw, hd = window * window, (side // window) ** 2, c // heads
    grid = side // window
    coords = np.stack(np.meshgrid(np.arange(window), np.arange(window), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + window - 1
    index = (rel[..., 0] * (2 * window - 1) + rel[..., 1]).reshape(-1)
    region = np.zeros((side, side), np.int64)
    shift = window // 2
    for i, rows in enumerate((slice(0, -window), slice(-window, -shift), slice(-shift, None))):
        for j, cols in enumerate((slice(0, -window), slice(-window, -shift), slice(-shift, None))):
            region[rows, cols] = 3 * i + j
    windows = region.reshape(grid, window, grid, window).transpose(0, 2, 1, 3).reshape(nw, n)
    mask = np.where(windows[:, :, None] != windows[:, None, :], -100.0, 0.0).astype(np.float32)

    def shape(name: str, dims: tuple[int, ...]) -> str:
        return b.constant(name, np.array(dims, np.int64))

    def roll(y: str, name: str, by: int) -> str:
        """torch.roll over H and W as exported: each axis a Slice of its tail concatenated before its head."""
        for axis in (1, 2):
            cut = (side - by) % side
            tail = b.node("Slice", [y, shape(f"{name}.t{axis}.s", (cut,)), shape(f"{name}.t{axis}.e", (side,)),
                                    shape(f"{name}.t{axis}.a", (axis,))], f"{name}/Slice_t{axis}")
            head = b.node("Slice", [y, shape(f"{name}.h{axis}.s", (0,)), shape(f"{name}.h{axis}.e", (cut,)),
                                    shape(f"{name}.h{axis}.a", (axis,))], f"{name}/Slice_h{axis}")
            y = b.node("Concat", [tail, head], f"{name}/Concat{axis}", axis=axis)
        return y

    for i in range(2):
        p, shifted = f"layers.0.blocks.{i}", i == 1
        y = b.node("Reshape", [b.layer_norm(x, f"{p}.norm1", c, epsilon=1e-5), shape(f"{p}.hw", (1, side, side, c))],
                   f"{p}/Reshape_hw")
        if shifted:
            y = roll(y, f"{p}.roll", -shift)
        y = b.node("Reshape", [y, shape(f"{p}.part", (1, grid, window, grid, window, c))], f"{p}/Reshape_part")
        y = b.node("Transpose", [y], f"{p}/Transpose_part", perm=[0, 1, 3, 2, 4, 5])
        y = b.node("Reshape", [y, shape(f"{p}.windows", (nw, n, c))], f"{p}/Reshape_windows")
        qkv = b.node("Reshape", [b.dense(y, f"{p}.attn.qkv", c, 3 * c, 0.05), shape(f"{p}.qkv", (nw, n, 3, heads, hd))],
                     f"{p}.attn/Reshape")
        qkv = b.node("Transpose", [qkv], f"{p}.attn/Transpose", perm=[2, 0, 3, 1, 4])
        b.node("Split", [qkv], f"{p}.attn/Split", outputs=3, axis=0)
        q, k, v = (b.node("Squeeze", [f"{p}.attn/Split:{j}", shape(f"{p}.attn.axis{j}", (0,))], f"{p}.attn/Squeeze_{j}")
                   for j in range(3))
        q = b.node("Mul", [q, b.constant(f"{p}.attn.scale", np.array(hd ** -0.5, np.float32))], f"{p}.attn/Mul")
        scores = b.node("MatMul", [q, b.node("Transpose", [k], f"{p}.attn/Transpose_k", perm=[0, 1, 3, 2])],
                        f"{p}.attn/MatMul")
        table = b.normal(f"{p}.attn.relative_position_bias_table", ((2 * window - 1) ** 2, heads), 0.02)
        bias = b.node("Gather", [table, b.constant(f"{p}.attn.relative_position_index", index)], f"{p}.attn/Gather")
        bias = b.node("Transpose", [b.node("Reshape", [bias, shape(f"{p}.bias", (n, n, heads))], f"{p}.attn/Reshape_b")],
                      f"{p}.attn/Transpose_b", perm=[2, 0, 1])
        scores = b.node("Add", [scores, b.node("Unsqueeze", [bias, shape(f"{p}.attn.ax0", (0,))], f"{p}.attn/Unsqueeze")],
                        f"{p}.attn/Add")
        if shifted:
            scores = b.node("Reshape", [scores, shape(f"{p}.attn.nw", (1, nw, heads, n, n))], f"{p}.attn/Reshape_m")
            scores = b.node("Add", [scores, b.constant(f"{p}.attn.mask", mask[None, :, None])], f"{p}.attn/Add_mask")
            scores = b.node("Reshape", [scores, shape(f"{p}.attn.flat", (nw, heads, n, n))], f"{p}.attn/Reshape_f")
        context = b.node("MatMul", [b.node("Softmax", [scores], f"{p}.attn/Softmax", axis=-1), v], f"{p}.attn/MatMul_1")
        context = b.node("Reshape", [b.node("Transpose", [context], f"{p}.attn/Transpose_1", perm=[0, 2, 1, 3]),
                                     shape(f"{p}.attn.merged", (nw, n, c))], f"{p}.attn/Reshape_1")
        y = b.dense(context, f"{p}.attn.proj", c, c, 0.05)
        y = b.node("Reshape", [y, shape(f"{p}.rev", (1, grid, grid, window, window, c))], f"{p}/Reshape_rev")
        y = b.node("Transpose", [y], f"{p}/Transpose_rev", perm=[0, 1, 3, 2, 4, 5])
        y = b.node("Reshape", [y, shape(f"{p}.grid", (1, side, side, c))], f"{p}/Reshape_grid")
        if shifted:
            y = roll(y, f"{p}.unroll", shift)
        x = b.node("Add", [x, b.node("Reshape", [y, shape(f"{p}.tokens", (1, side * side, c))], f"{p}/Reshape_tokens")],
                   f"{p}/Add")
        h = b.dense(b.gelu(b.dense(b.layer_norm(x, f"{p}.norm2", c, epsilon=1e-5), f"{p}.mlp.fc1", c, 4 * c, 0.05),
                           f"{p}.mlp.act"), f"{p}.mlp.fc2", 4 * c, c, 0.03)
        x = b.node("Add", [x, h], f"{p}/Add_1")
    return b.model("swin_block", [tensor_info("input", (1, side * side, c))], [tensor_info(x, (1, side * side, c))])


def deeplab_block(seed: int = 18, c: int = 256, mid: int = 64, side: int = 33) -> onnx.ModelProto:
    """Two bottlenecks of a DeepLab-v3 backbone at output stride 8 (a 513x513 image gives 65x65
    maps there; 33x33 here): 1x1 reduce, a 3x3 of dilation 2, then 4, 1x1 expand, residual. Odd
    maps split into phases of different sizes (17 and 16 rows at dilation 2, 9 and 8 at 4). Then
    its ASPP head: a 1x1 branch, 3x3 branches of dilation 12, 24 and 36 (taps that read padding
    for some or all output rows), and an image-pooling branch resized back, concatenated and
    projected."""
    b, x = ModelBuilder(seed), "input"
    for i, d in enumerate((2, 4)):
        y = b.node("Relu", [b.conv_bn(x, f"b{i}.reduce", c, mid, 1)], f"b{i}/Relu")
        y = b.node("Relu", [b.conv_bn(y, f"b{i}.dilated", mid, mid, 3, dilation=d)], f"b{i}/Relu_1")
        x = b.node("Relu", [b.node("Add", [b.conv_bn(y, f"b{i}.expand", mid, c, 1), x], f"b{i}/Add")],
                   f"b{i}/Relu_2")
    branches = [b.node("Relu", [b.conv_bn(x, f"aspp{i}", c, mid, 1 if d == 1 else 3, dilation=d)], f"aspp{i}/Relu")
                for i, d in enumerate((1, 12, 24, 36))]
    pooled = b.node("Relu", [b.conv_bn(b.node("GlobalAveragePool", [x], "pool/Pool"), "pool", c, mid, 1)],
                    "pool/Relu")
    sizes = b.constant("pool.sizes", np.array([1, mid, side, side], np.int64))
    branches.append(b.node("Resize", [pooled, "", "", sizes], "pool/Resize", mode="linear"))
    y = b.node("Relu", [b.conv_bn(b.node("Concat", branches, "aspp/Concat", axis=1), "project", 5 * mid, mid, 1)],
               "project/Relu")
    return b.model("deeplab_block", [tensor_info("input", (1, c, side, side))], [tensor_info(y, (1, mid, side, side))])


def video_block(seed: int = 19, c: int = 64, frames: int = 8, side: int = 56) -> onnx.ModelProto:
    """R(2+1)D-style video layers on an 8-frame clip: a 3x7x7 stem of stride (1, 2, 2), a 3-D max
    pool, then two residual blocks of (2+1)-D convolutions (1x3x3 in space, then 3x1x1 in time,
    BatchNorm after each, unfolded in the file as exporters write it), a 3x3x3 convolution of
    stride 2 with a strided 1x1x1 shortcut, and a global average over the clip."""
    b = ModelBuilder(seed)

    def conv3d(x: str, name: str, cin: int, cout: int, kernel: tuple[int, int, int],
               stride: tuple[int, int, int] = (1, 1, 1)) -> str:
        fan_in = cin * math.prod(kernel)
        weight = b.normal(f"{name}.weight", (cout, cin, *kernel), math.sqrt(2.0 / fan_in))
        y = b.node("Conv", [x, weight], f"{name}/Conv", kernel_shape=list(kernel), strides=list(stride),
                   pads=[k // 2 for k in kernel] * 2)
        return b.batch_norm(y, f"{name}.bn", cout, (0.5, 1.0))

    x = b.node("Relu", [conv3d("input", "stem", 3, c, (3, 7, 7), (1, 2, 2))], "stem/Relu")
    x = b.node("MaxPool", [x], "pool/MaxPool", kernel_shape=[1, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 0, 1, 1])
    for i in range(2):
        y = b.node("Relu", [conv3d(x, f"b{i}.space", c, c, (1, 3, 3))], f"b{i}/Relu")
        y = conv3d(y, f"b{i}.time", c, c, (3, 1, 1))
        x = b.node("Relu", [b.node("Add", [y, x], f"b{i}/Add")], f"b{i}/Relu_1")
    y = b.node("Relu", [conv3d(x, "down.conv", c, 2 * c, (3, 3, 3), (2, 2, 2))], "down/Relu")
    x = b.node("Relu", [b.node("Add", [y, conv3d(x, "down.shortcut", c, 2 * c, (1, 1, 1), (2, 2, 2))], "down/Add")],
               "down/Relu_1")
    x = b.node("GlobalAveragePool", [x], "head/Pool")
    out = (1, 2 * c, 1, 1, 1)
    return b.model("video_block", [tensor_info("input", (1, 3, frames, side, side))], [tensor_info(x, out)])


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
    "convnext_block": convnext_block,
    "shufflenet_block": shufflenet_block,
    "csp_block": csp_block,
    "mixer_block": mixer_block,
    "dcgan_generator": dcgan_generator,
    "regnet_block": regnet_block,
    "resnest_block": resnest_block,
    "hrnet_stage": hrnet_stage,
    "res2net_block": res2net_block,
    "swin_block": swin_block,
    "deeplab_block": deeplab_block,
    "video_block": video_block,
}
