"""ONNX's own node tests, for every op the frontend supports.

The cases (model, inputs, expected outputs) are generated at collection time
by onnx's test-case generators; nothing is committed.  Each case whose nodes
are all supported runs through `load_onnx` and the numpy reference
evaluator, before and after the graph passes, and through the whole build
(compiled kernels, the C graph executor, the weights file).  Operands that autosched requires to be constants (Reshape's
shape, Slice's bounds, Clip's limits, ...) are graph inputs in many cases;
they are baked into the model as initializers with the case's data, as a
deployment with static shapes would.  A case that cannot pass is listed in
EXPECTED_FAILURES with the reason, and must fail with a FrontendError.
"""

import re
import warnings

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases

from autosched.compile.model import build_model
from autosched.errors import AutoschedError, FrontendError
from autosched.frontend.onnx import CONVERTERS, load_onnx
from autosched.graph.passes import optimize
from autosched.graph.reference import run_graph
from autosched.runtime import load_model
from autosched.task import extract_tasks

EXPECTED_FAILURES = {
    r"^test_cast(like)?_.*(BFLOAT16|FLOAT8|INT4|UINT4|INT2|UINT2|FLOAT4E2M1)": "element type outside the IR's dtypes",
    r"_(bfloat16|bf16)(_|$)": "bfloat16 is outside the IR's dtypes",
    r"_string(_|$)": "string tensors are outside the IR's dtypes",
    r"^test_training_dropout": "training-mode Dropout",
    r"^test_identity_(sequence|opt)$": "sequence and optional types are not tensors",
    r"^test_maxpool_with_argmax_": "MaxPool's Indices output",
    r"^test_resize_.*antialias": "Resize with antialias",
    r"^test_resize_tf_crop_and_resize": "Resize's tf_crop_and_resize (a region of interest)",
    r"^test_resize_.*_not_(larger|smaller)$": "Resize's keep_aspect_ratio_policy",
    r"^test_center_crop_pad_.*_expanded$": "the target shape is a run-time input (static shapes only)",
    r"^test_(de)?quantizelinear_(e4m3fn|e5m2|float4e2m1|u?int[24])": "float8, float4, int4 and int2 are outside the IR's dtypes",
    r"^test_(de)?quantizelinear_blocked": "blocked quantization (block_size)",
    r"^test_dynamicquantizelinear_.*expanded$": "the scale is computed at run time (QDQ scales are constants)",
    r"^test_einsum_batch_diagonal$": "Einsum with a repeated subscript (a diagonal)",
    r"^test_(blackman|hamming|hann)window_.*expanded$": "the window size is a run-time input (static shapes only)",
}


#: cases the numpy evaluator passes but autosched does not compile yet, each failing with a clear error
COMPILED_EXPECTED_FAILURES = {
    r"^test_matmul_(1d_|4d_1d)": "MatMul with a 1-D operand is not compiled",
    r"^test_reshape_allowzero_reordered$": "a reshape of an empty tensor",
}


def _supported_cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    return [c for c in cases if c.model.graph.node and all(n.op_type in CONVERTERS and not n.domain for n in c.model.graph.node)]


CASES = _supported_cases()


def _expected_failure(name, table=EXPECTED_FAILURES):
    return next((reason for pattern, reason in table.items() if re.search(pattern, name)), None)


def _params():
    for case in CASES:
        reason = _expected_failure(case.name)
        marks = [pytest.mark.xfail(raises=FrontendError, strict=True, reason=reason)] if reason else []
        yield pytest.param(case, id=case.name, marks=marks)


def _array(value):
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def _freeze_constant_operands(model, feeds):
    """Move the graph inputs that feed constant-only operands into initializers."""
    frozen = {
        node.input[i]
        for node in model.graph.node
        for i in CONVERTERS[node.op_type].constant_inputs
        if i < len(node.input) and node.input[i] in feeds
    }
    result = onnx.ModelProto()
    result.CopyFrom(model)
    kept = [value for value in result.graph.input if value.name not in frozen]
    del result.graph.input[:]
    result.graph.input.extend(kept)
    result.graph.initializer.extend(numpy_helper.from_array(feeds[name], name) for name in sorted(frozen))
    return result, {name: array for name, array in feeds.items() if name not in frozen}


def _saved_data_sets(case, tmp_path):
    """(model file, runtime inputs, expected outputs) for each of the case's data sets."""
    for index, (inputs, outputs) in enumerate(case.data_sets):
        feeds = {value.name: _array(data) for value, data in zip(case.model.graph.input, inputs)}
        model, runtime_inputs = _freeze_constant_operands(case.model, feeds)
        path = tmp_path / f"{case.name}_{index}.onnx"
        onnx.save(model, path)
        yield path, runtime_inputs, outputs


def _rtol(case, expected: np.ndarray, floor: float = 0.0) -> float:
    """The case's relative tolerance; for float16 results at least 4 ulp (2^-8): a function's
    expanded body rounds to float16 after every op, and fused or reordered ops round elsewhere."""
    return max(case.rtol, floor, 2.0**-8 if expected.dtype == np.float16 else 0.0)


@pytest.mark.parametrize("case", _params())
def test_node_case(case, tmp_path):
    for path, runtime_inputs, outputs in _saved_data_sets(case, tmp_path):
        graph = load_onnx(path)
        optimized = optimize(graph)
        for candidate in (graph, optimized):
            got = run_graph(candidate, runtime_inputs)
            for value, expected in zip(case.model.graph.output, outputs):
                expected = _array(expected)
                assert got[value.name].dtype == expected.dtype
                np.testing.assert_allclose(got[value.name], expected, rtol=_rtol(case, expected), atol=case.atol,
                                           err_msg=value.name)
        tasks = extract_tasks(optimized)
        assert sum(task.weight for task in tasks.tasks) == len(tasks.groups)


_NAMES = {case.name for case in CASES}
#: integer widths whose kernels are the int32/int64 cases' code at another type
_NARROW_INTS = re.compile(r"_(u?int(8|16)|uint(32|64))(_|$)")


def _compiled_elsewhere(name: str) -> bool:
    """Whether the fast suite compiles this case's kernel in another case: a function's body
    (its ops have their own cases), an `_example` whose `_random` twin has the same shapes and
    attributes, or a narrow integer type of an op compiled at int32/int64 (all under -m slow)."""
    return (name.endswith(("_expanded", "_expanded_ver18")) or _NARROW_INTS.search(name) is not None
            or (name.endswith("_example") and name[:-len("_example")] + "_random" in _NAMES))


def _compiled_params():
    for case in CASES:
        if _expected_failure(case.name):
            continue
        reason = _expected_failure(case.name, COMPILED_EXPECTED_FAILURES)
        marks = [pytest.mark.xfail(raises=(AutoschedError, ValueError), strict=True, reason=reason)] if reason else []
        if _compiled_elsewhere(case.name):
            marks.append(pytest.mark.slow)
        yield pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", _compiled_params())
def test_node_case_compiled(case, tmp_path):
    """The same cases through the whole build: generated kernels, C graph executor, weights file."""
    for path, runtime_inputs, outputs in _saved_data_sets(case, tmp_path):
        built = load_model(build_model(load_onnx(path), path.with_suffix(".so")).library)
        got = built.run(runtime_inputs)
        built.close()
        for value, expected in zip(case.model.graph.output, outputs):
            expected = _array(expected)
            assert got[value.name].dtype == expected.dtype
            np.testing.assert_allclose(got[value.name], expected, rtol=_rtol(case, expected, 1e-4),
                                       atol=max(case.atol, 1e-5), err_msg=value.name)


def test_expected_failures_are_all_used():
    names = [case.name for case in CASES]
    for pattern in [*EXPECTED_FAILURES, *COMPILED_EXPECTED_FAILURES]:
        assert any(re.search(pattern, name) for name in names), f"stale expected failure {pattern!r}"


def test_every_supported_op_has_conformance_cases():
    covered = {node.op_type for case in CASES if not _expected_failure(case.name) for node in case.model.graph.node}
    onnx_ops = {op for op in CONVERTERS if "." not in op}  # contrib ops ("com.microsoft.QGemm"): test_quantized_ops.py
    assert onnx_ops - covered == set()
