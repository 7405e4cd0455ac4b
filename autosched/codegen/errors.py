"""Errors of code generation and compilation."""


class CodegenError(ValueError):
    """The lowered program uses something this back end cannot express."""


class CompileError(RuntimeError):
    """The system compiler rejected generated code; the message carries its diagnostics."""
