"""Errors of code generation and compilation."""
import re

from autosched.errors import AutoschedError


class CodegenError(AutoschedError, ValueError):
    """The lowered program uses something this back end cannot express."""


class CompileError(AutoschedError, RuntimeError):
    """The system compiler rejected generated code; the message carries its diagnostics."""


def format_diagnostics(compiler: str, diagnostics: str, source: str, src_path: str, shown_as: str,
                       error_line: str) -> str:
    """A compiler's errors with `src_path` shown as `shown_as`, each error followed by the
    offending line of the generated source. `error_line` is a regex whose group 1 is the line
    number in the compiler's error format (after the path)."""
    lines = source.splitlines()
    out = [f"{compiler} failed to compile the generated code:"]
    for diag in diagnostics.splitlines():
        out.append(diag.replace(src_path, shown_as))
        m = re.match(re.escape(src_path) + error_line, diag)
        if m and 0 < int(m.group(1)) <= len(lines):
            out.append(f"    line {m.group(1)}: {lines[int(m.group(1)) - 1].strip()}")
    return "\n".join(out)
