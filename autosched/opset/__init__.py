"""The operator set: one record per graph op, from ONNX import to its default schedule.

`record` defines what an op is (`OpDef`); the family modules (`elementwise`, `conv`, `matmul`,
`pool`, `norm`, `reduce`, `transform`, `layout`) each define the records of a few related ops;
`registry` gathers them and is what the frontend, shape inference, the numpy reference and
task compilation look ops up in.
"""
