"""Schedule templates per op and target: the search spaces the tuners explore.

Importing this package registers every built-in template (the CPU ones live in `llvm`, the GPU ones in `cuda`).
"""
from search_spaces.registry import Template, TemplateError, get_template, register, templates
from search_spaces import llvm  # noqa: E402,F401 - registers the CPU templates
from search_spaces import cuda  # noqa: E402,F401 - registers the GPU templates

__all__ = ["Template", "TemplateError", "get_template", "register", "templates"]
