"""Errors of code generation and compilation."""
from autosched.errors import AutoschedError


class CodegenError(AutoschedError, ValueError):
    """The lowered program uses something this back end cannot express."""


class CompileError(AutoschedError, RuntimeError):
    """The system compiler rejected generated code; the message carries its diagnostics."""
