"""Lowering: schedules to loop nests over flat buffers."""
from autosched.lower.ir import Buffer, PrimFunc
from autosched.lower.lower import lower

__all__ = ["lower", "PrimFunc", "Buffer"]
