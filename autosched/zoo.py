"""Benchmark models built in code: ResNet-18, MobileNetV2, a BERT-base layer, an MLP, and
beside them SqueezeNet, ResNeXt-style bottlenecks and a ViT-style block.

Tests and benchmarks need real architectures without downloads, so each
model is written out with onnx.helper in the shape PyTorch exports it
(BatchNormalization after every Conv, Clip with constant bounds for ReLU6,
a shape computed by Shape→Slice→Concat, an Erf-based GELU) and filled with
seeded weights scaled so activations stay near unit size.

    python -m autosched.zoo OUTDIR      # writes one .onnx file per model
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx

from autosched.zoo_blocks import BLOCKS
from autosched.zoo_builder import ModelBuilder, tensor_info


def resnet18(seed: int = 0) -> onnx.ModelProto:
    """ResNet-18 for 1×3×224×224 images, torchvision layout."""
    b = ModelBuilder(seed)
    x = b.conv_bn("input", "conv1", 3, 64, 7, stride=2)
    x = b.node("Relu", [x], "relu/Relu")
    x = b.node("MaxPool", [x], "maxpool/MaxPool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512), start=1):
        for block in range(2):
            stride = 2 if stage > 1 and block == 0 else 1
            name = f"layer{stage}.{block}"
            y = b.node("Relu", [b.conv_bn(x, f"{name}.conv1", cin, cout, 3, stride)], f"{name}/relu1/Relu")
            y = b.conv_bn(y, f"{name}.conv2", cout, cout, 3, gamma=(0.2, 0.5))
            shortcut = b.conv_bn(x, f"{name}.downsample", cin, cout, 1, stride) if stride != 1 or cin != cout else x
            x = b.node("Relu", [b.node("Add", [y, shortcut], f"{name}/Add")], f"{name}/relu2/Relu")
            cin = cout
    logits = b.classifier_head(x, 512, 1000)
    return b.model("resnet18", [tensor_info("input", (1, 3, 224, 224))], [tensor_info(logits, (1, 1000))])


_MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(seed: int = 0) -> onnx.ModelProto:
    """MobileNetV2 (width 1.0) for 1×3×224×224 images, torchvision layout."""
    b = ModelBuilder(seed)
    x = b.relu6(b.conv_bn("input", "features.0", 3, 32, 3, stride=2), "features.0.act")
    cin, index = 32, 1
    for expand, cout, repeats, first_stride in _MOBILENET_V2_STAGES:
        for r in range(repeats):
            stride = first_stride if r == 0 else 1
            name = f"features.{index}"
            hidden = cin * expand
            y = x
            if expand != 1:
                y = b.relu6(b.conv_bn(y, f"{name}.expand", cin, hidden, 1), f"{name}.expand.act")
            y = b.relu6(b.conv_bn(y, f"{name}.depthwise", hidden, hidden, 3, stride, group=hidden), f"{name}.depthwise.act")
            y = b.conv_bn(y, f"{name}.project", hidden, cout, 1, gamma=(0.2, 0.5))
            x = b.node("Add", [x, y], f"{name}/Add") if stride == 1 and cin == cout else y
            cin, index = cout, index + 1
    x = b.relu6(b.conv_bn(x, f"features.{index}", cin, 1280, 1), f"features.{index}.act")
    pooled = b.node("GlobalAveragePool", [x], "avgpool/GlobalAveragePool")
    flat = b.node("Flatten", [pooled], "flatten/Flatten", axis=1)
    dropped = b.node("Dropout", [flat], "classifier.0/Dropout")
    logits = b.linear(dropped, "classifier.1", 1280, 1000, std=math.sqrt(1.0 / 1280))
    return b.model("mobilenet_v2", [tensor_info("input", (1, 3, 224, 224))], [tensor_info(logits, (1, 1000))])


def bert_layer(seed: int = 0, seq: int = 128, hidden: int = 768, heads: int = 12) -> onnx.ModelProto:
    """One BERT-base encoder layer (batch 1), post-LayerNorm, Erf-based GELU."""
    b = ModelBuilder(seed)
    head = hidden // heads
    x, mask = "hidden_states", "attention_mask"
    split_heads = b.constant("split_heads_shape", np.array([1, seq, heads, head], np.int64))

    def projection(name: str, perm: list[int]) -> str:
        y = b.dense(x, f"attention.self.{name}", hidden, hidden, 0.02)
        y = b.node("Reshape", [y, split_heads], f"attention.self.{name}/Reshape")
        return b.node("Transpose", [y], f"attention.self.{name}/Transpose", perm=perm)

    q, k, v = projection("query", [0, 2, 1, 3]), projection("key", [0, 2, 3, 1]), projection("value", [0, 2, 1, 3])
    scores = b.node("MatMul", [q, k], "attention.self/MatMul")
    scores = b.node("Div", [scores, b.constant("attention.scale", np.array(math.sqrt(head), np.float32))], "attention.self/Div")
    scores = b.node("Add", [scores, mask], "attention.self/Add")
    probs = b.node("Softmax", [scores], "attention.self/Softmax", axis=-1)
    context = b.node("MatMul", [probs, v], "attention.self/MatMul_1")
    context = b.node("Transpose", [context], "attention.self/Transpose", perm=[0, 2, 1, 3])
    # The merged shape is computed from the input's shape, as exporters write it.
    batch_seq = b.node("Slice", [b.node("Shape", [x], "attention.self/Shape"),
                                 b.constant("slice_starts", np.array([0], np.int64)),
                                 b.constant("slice_ends", np.array([2], np.int64))], "attention.self/Slice")
    merged = b.node("Concat", [batch_seq, b.constant("hidden_size", np.array([hidden], np.int64))],
                    "attention.self/Concat", axis=0)
    context = b.node("Reshape", [context, merged], "attention.self/Reshape")
    attended = b.dense(context, "attention.output.dense", hidden, hidden, 0.02)
    x = b.layer_norm(b.node("Add", [attended, x], "attention.output/Add"), "attention.output.LayerNorm", hidden)
    inner = b.dense(x, "intermediate.dense", hidden, 4 * hidden, 0.02)
    inner = b.gelu(inner, "intermediate.gelu")
    out = b.dense(inner, "output.dense", 4 * hidden, hidden, 0.02)
    out = b.layer_norm(b.node("Add", [out, x], "output/Add"), "output.LayerNorm", hidden)
    return b.model(
        "bert_layer",
        [tensor_info("hidden_states", (1, seq, hidden)), tensor_info("attention_mask", (1, 1, 1, seq))],
        [tensor_info(out, (1, seq, hidden))],
    )


def layer_norm_written_out(b: ModelBuilder, x: str, name: str, hidden: int) -> str:
    """LayerNorm as exporters write it below opset 17: two means, a Pow by 2, Sqrt, Div, γ, β."""
    mean = b.node("ReduceMean", [x], f"{name}/ReduceMean", axes=[-1], keepdims=1)
    centred = b.node("Sub", [x, mean], f"{name}/Sub")
    square = b.node("Pow", [centred, b.constant(f"{name}.two", np.array(2.0, np.float32))], f"{name}/Pow")
    var = b.node("ReduceMean", [square], f"{name}/ReduceMean_1", axes=[-1], keepdims=1)
    std = b.node("Sqrt", [b.node("Add", [var, b.constant(f"{name}.eps", np.array(1e-6, np.float32))], f"{name}/Add")],
                 f"{name}/Sqrt")
    y = b.node("Div", [centred, std], f"{name}/Div")
    scale = b.constant(f"{name}.weight", (1.0 + b.rng.standard_normal(hidden) * 0.05).astype(np.float32))
    y = b.node("Mul", [y, scale], f"{name}/Mul")
    return b.node("Add", [y, b.constant(f"{name}.bias", (b.rng.standard_normal(hidden) * 0.05).astype(np.float32))],
                  f"{name}/Add_1")


def gelu_tanh(b: ModelBuilder, x: str, name: str) -> str:
    """GELU's tanh approximation, ½x(1 + tanh(√(2/π)(x + 0.044715x³))), with x³ as Pow(x, 3)."""
    cube = b.node("Pow", [x, b.constant(f"{name}.three", np.array(3.0, np.float32))], f"{name}/Pow")
    inner = b.node("Add", [x, b.node("Mul", [cube, b.constant(f"{name}.c", np.array(0.044715, np.float32))],
                                     f"{name}/Mul")], f"{name}/Add")
    k = b.constant(f"{name}.k", np.array(math.sqrt(2.0 / math.pi), np.float32))
    t = b.node("Tanh", [b.node("Mul", [inner, k], f"{name}/Mul_1")], f"{name}/Tanh")
    one = b.node("Add", [t, b.constant(f"{name}.one", np.array(1.0, np.float32))], f"{name}/Add_1")
    half = b.node("Mul", [x, b.constant(f"{name}.half", np.array(0.5, np.float32))], f"{name}/Mul_2")
    return b.node("Mul", [half, one], f"{name}/Mul_3")


def vit_block(seed: int = 0, side: int = 14, patch: int = 16, hidden: int = 384, heads: int = 6,
              depth: int = 1) -> onnx.ModelProto:
    """A ViT-S/16-style encoder (batch 1, `side`² patches plus a class token, pre-LayerNorm) in the
    form a converted JAX/Flax checkpoint takes: LayerNorm written out, tanh GELU (Flax's default),
    a fused QKV projection split per head, 197 tokens that no vector width divides.

    Each of those once cost far more than its arithmetic (libm's tanhf, powf, nine kernels per
    LayerNorm, softmax rows in scalar code); this model keeps them covered."""
    b = ModelBuilder(seed)
    head, tokens = hidden // heads, side * side + 1
    weight = b.normal("patch_embed.weight", (hidden, 3, patch, patch), math.sqrt(2.0 / (3 * patch * patch)))
    x = b.node("Conv", ["pixel_values", weight, b.normal("patch_embed.bias", (hidden,), 0.02)], "patch_embed/Conv",
               kernel_shape=[patch, patch], strides=[patch, patch])
    x = b.node("Reshape", [x, b.constant("patch_embed.shape", np.array([1, hidden, side * side], np.int64))],
               "patch_embed/Reshape")
    x = b.node("Transpose", [x], "patch_embed/Transpose", perm=[0, 2, 1])
    x = b.node("Concat", [b.normal("cls_token", (1, 1, hidden), 0.02), x], "cls/Concat", axis=1)
    x = b.node("Add", [x, b.normal("pos_embed", (1, tokens, hidden), 0.02)], "pos_embed/Add")
    split_heads = b.constant("qkv_shape", np.array([1, tokens, 3, heads, head], np.int64))
    merged = b.constant("merged_shape", np.array([1, tokens, hidden], np.int64))
    for i in range(depth):
        p = f"blocks.{i}"
        qkv = b.dense(layer_norm_written_out(b, x, f"{p}.norm1", hidden), f"{p}.attn.qkv", hidden, 3 * hidden, 0.02)
        qkv = b.node("Transpose", [b.node("Reshape", [qkv, split_heads], f"{p}.attn/Reshape")], f"{p}.attn/Transpose",
                     perm=[2, 0, 3, 1, 4])
        b.node("Split", [qkv], f"{p}.attn/Split", outputs=3, axis=0)
        q, k, v = (b.node("Squeeze", [f"{p}.attn/Split:{j}", b.constant(f"{p}.attn.axis{j}", np.array([0], np.int64))],
                          f"{p}.attn/Squeeze_{j}") for j in range(3))
        scores = b.node("MatMul", [q, b.node("Transpose", [k], f"{p}.attn/Transpose_k", perm=[0, 1, 3, 2])],
                        f"{p}.attn/MatMul")
        scores = b.node("Mul", [scores, b.constant(f"{p}.attn.scale", np.array(head ** -0.5, np.float32))],
                        f"{p}.attn/Mul")
        context = b.node("MatMul", [b.node("Softmax", [scores], f"{p}.attn/Softmax", axis=-1), v], f"{p}.attn/MatMul_1")
        context = b.node("Transpose", [context], f"{p}.attn/Transpose_1", perm=[0, 2, 1, 3])
        context = b.node("Reshape", [context, merged], f"{p}.attn/Reshape_1")
        x = b.node("Add", [x, b.dense(context, f"{p}.attn.proj", hidden, hidden, 0.02)], f"{p}/Add")
        inner = gelu_tanh(b, b.dense(layer_norm_written_out(b, x, f"{p}.norm2", hidden), f"{p}.mlp.fc1", hidden,
                                     4 * hidden, 0.02), f"{p}.mlp.act")
        x = b.node("Add", [x, b.dense(inner, f"{p}.mlp.fc2", 4 * hidden, hidden, 0.02)], f"{p}/Add_1")
    x = layer_norm_written_out(b, x, "norm", hidden)
    return b.model("vit_block", [tensor_info("pixel_values", (1, 3, side * patch, side * patch))],
                   [tensor_info(x, (1, tokens, hidden))])


def llama_block(seed: int = 0, seq: int = 128, hidden: int = 512, heads: int = 8, kv_heads: int = 2, ff: int = 1376,
                padding_mask: bool = False, past: int = 0) -> onnx.ModelProto:
    """A Llama-style decoder block (batch 1, `seq` new tokens) in opset 23's own ops, as a newer
    exporter writes it: RMSNormalization, RotaryEmbedding of the 3-D projections by position ids
    (K's as interleaved pairs), Attention with grouped-query heads and is_causal, a SwiGLU MLP.
    With `padding_mask`, a boolean [1, 1, seq, past + seq] input says which keys each query may
    see (a batch's padding); with `past`, a K/V cache of that many tokens comes in
    (past_key/past_value) and goes out with the new ones (present_key/present_value): a decode
    step is `seq=1`."""
    b = ModelBuilder(seed)
    size = hidden // heads
    angles = np.arange(4 * (past + seq))[:, None] / (10000 ** (np.arange(0, size, 2) / size))[None]
    cos, sin = (b.constant(n, f(angles).astype(np.float32)) for n, f in (("cos_cache", np.cos), ("sin_cache", np.sin)))
    positions = b.constant("position_ids", np.arange(past, past + seq, dtype=np.int64)[None])

    def rms(x: str, name: str) -> str:
        scale = b.constant(f"{name}.weight", (1 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32))
        return b.node("RMSNormalization", [x, scale], name, epsilon=1e-6)

    def proj(x: str, name: str, cin: int, cout: int) -> str:
        return b.node("MatMul", [x, b.normal(f"{name}.weight", (cin, cout), cin ** -0.5)], f"{name}/MatMul")

    h = rms("hidden_states", "input_layernorm")
    q = b.node("RotaryEmbedding", [proj(h, "q_proj", hidden, hidden), cos, sin, positions], "q_rope", num_heads=heads)
    k = b.node("RotaryEmbedding", [proj(h, "k_proj", hidden, kv_heads * size), cos, sin, positions], "k_rope",
               num_heads=kv_heads, interleaved=1)
    v = proj(h, "v_proj", hidden, kv_heads * size)
    cache = ["past_key", "past_value"] if past else []
    attention = [q, k, v] + (["attention_mask"] if padding_mask else [""] * bool(past)) + cache
    o = "attn"
    b.nodes.append(onnx.helper.make_node("Attention", attention, [o] + [f"present_{n[5:]}" for n in cache], name="attn",
                                         is_causal=1, q_num_heads=heads, kv_num_heads=kv_heads))
    x = b.node("Add", ["hidden_states", proj(o, "o_proj", hidden, hidden)], "residual1")
    h = rms(x, "post_attention_layernorm")
    gate = proj(h, "gate_proj", hidden, ff)
    silu = b.node("Mul", [gate, b.node("Sigmoid", [gate], "mlp/Sigmoid")], "mlp/silu")
    y = b.node("Add", [x, proj(b.node("Mul", [silu, proj(h, "up_proj", hidden, ff)], "mlp/Mul"), "down_proj", ff,
                               hidden)], "residual2")
    inputs = [tensor_info("hidden_states", (1, seq, hidden))]
    if padding_mask:
        inputs.append(onnx.helper.make_tensor_value_info("attention_mask", onnx.TensorProto.BOOL, [1, 1, seq, past + seq]))
    inputs += [tensor_info(n, (1, kv_heads, past, size)) for n in cache]
    outputs = [tensor_info(y, (1, seq, hidden))] + [tensor_info(f"present_{n[5:]}", (1, kv_heads, past + seq, size))
                                                    for n in cache]
    model = b.model("llama_block", inputs, outputs)
    model.opset_import[0].version = 23
    return model


def mlp(seed: int = 0, batch: int = 64, sizes: Sequence[int] = (784, 1024, 1024, 10)) -> onnx.ModelProto:
    """A 784-1024-1024-10 perceptron with ReLU, batch 64."""
    b = ModelBuilder(seed)
    x = "input"
    for i, (cin, cout) in enumerate(zip(sizes, sizes[1:])):
        x = b.linear(x, f"fc{i + 1}", cin, cout)
        if i < len(sizes) - 2:
            x = b.node("Relu", [x], f"relu{i + 1}/Relu")
    return b.model("mlp", [tensor_info("input", (batch, sizes[0]))], [tensor_info(x, (batch, sizes[-1]))])


def resnext_block(seed: int = 0, size: int = 56) -> onnx.ModelProto:
    """ResNeXt-50 (32×4d)'s first two stages cut short: two bottlenecks of width 128 (32 groups of
    4 channels) at size², then two of width 256 (groups of 8) at half that, on 64 input channels."""
    b = ModelBuilder(seed)

    def bottleneck(x: str, name: str, cin: int, width: int, cout: int, stride: int) -> str:
        y = b.node("Relu", [b.conv_bn(x, f"{name}.conv1", cin, width, 1)], f"{name}/Relu")
        y = b.node("Relu", [b.conv_bn(y, f"{name}.conv2", width, width, 3, stride=stride, group=32)], f"{name}/Relu_1")
        y = b.conv_bn(y, f"{name}.conv3", width, cout, 1, gamma=(0.2, 0.4))
        shortcut = x if cin == cout and stride == 1 else b.conv_bn(x, f"{name}.downsample", cin, cout, 1, stride=stride)
        return b.node("Relu", [b.node("Add", [y, shortcut], f"{name}/Add")], f"{name}/Relu_2")

    x = "input"
    for name, cin, width, cout, stride in (("layer1.0", 64, 128, 256, 1), ("layer1.1", 256, 128, 256, 1),
                                           ("layer2.0", 256, 256, 512, 2), ("layer2.1", 512, 256, 512, 1)):
        x = bottleneck(x, name, cin, width, cout, stride)
    return b.model("resnext_block", [tensor_info("input", (1, 64, size, size))], [tensor_info(x, (1, 512, size // 2, size // 2))])


def squeezenet(seed: int = 0, size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    """SqueezeNet 1.1 for 1×3×size×size images, torchvision layout: fire modules whose 1×1 and
    3×3 expand convolutions read the same input (parallel branches for graph substitutions)."""
    b = ModelBuilder(seed)

    def conv_relu(x: str, name: str, cin: int, cout: int, kernel: int, stride: int = 1) -> str:
        weight = b.normal(f"{name}.weight", (cout, cin, kernel, kernel), math.sqrt(2.0 / (cin * kernel * kernel)))
        bias = b.normal(f"{name}.bias", (cout,), 0.01)
        y = b.node("Conv", [x, weight, bias], f"{name}/Conv", kernel_shape=[kernel, kernel], strides=[stride, stride],
                   pads=[kernel // 2] * 4 if stride == 1 else [0] * 4)
        return b.node("Relu", [y], f"{name}/Relu")

    def pool(x: str, name: str) -> str:
        return b.node("MaxPool", [x], f"{name}/MaxPool", kernel_shape=[3, 3], strides=[2, 2])

    x = pool(conv_relu("input", "features.0", 3, 64, 3, stride=2), "features.2")
    cin = 64
    for index, (squeeze, expand) in enumerate(((16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192),
                                               (64, 256), (64, 256)), start=3):
        name = f"features.{index}"
        s = conv_relu(x, f"{name}.squeeze", cin, squeeze, 1)
        x = b.node("Concat", [conv_relu(s, f"{name}.expand1x1", squeeze, expand, 1),
                              conv_relu(s, f"{name}.expand3x3", squeeze, expand, 3)], f"{name}/Concat", axis=1)
        cin = 2 * expand
        if index in (4, 6):
            x = pool(x, f"features.{index}.pool")
    logits = b.node("Flatten", [b.node("GlobalAveragePool", [conv_relu(x, "classifier.1", cin, classes, 1)],
                                       "classifier.3/GlobalAveragePool")], "flatten/Flatten", axis=1)
    return b.model("squeezenet", [tensor_info("input", (1, 3, size, size))], [tensor_info(logits, (1, classes))])


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "bert_layer": bert_layer,
    "mlp": mlp,
}


#: Models beside the zoo, written only when named: benchmarks' --models, the tests that use them
OTHERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "llama_block": llama_block,
    "llama_decode": lambda: llama_block(seq=1, past=255),
    "resnext_block": resnext_block,
    "squeezenet": squeezenet,
    "vit_block": vit_block,
}


def save_zoo(directory: str | os.PathLike[str], names: Sequence[str] | None = None) -> list[Path]:
    """Write the zoo models (or the named ones, from the zoo, `OTHERS` or `zoo_blocks.BLOCKS`) as
    DIRECTORY/NAME.onnx; returns the paths."""
    builders = {**MODELS, **OTHERS, **BLOCKS}
    unknown = [n for n in names or () if n not in builders]
    if unknown:
        raise ValueError(f"unknown model {unknown[0]!r}: expected one of {', '.join(builders)}")
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names or MODELS:
        path = root / f"{name}.onnx"
        onnx.save(builders[name](), path)
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m autosched.zoo", description="Write the model zoo as ONNX files.")
    parser.add_argument("outdir", help="directory to write NAME.onnx files into")
    for path in save_zoo(parser.parse_args(argv).outdir):
        print(path)


if __name__ == "__main__":
    main()
