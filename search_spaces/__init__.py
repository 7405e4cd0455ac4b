"""Schedule templates per op and target: the search spaces the tuners explore.

Importing this package registers every built-in template in `autosched.templates` (the CPU ones
live in `llvm`, the GPU ones in `cuda`); that registry imports it on its first lookup.
"""
from search_spaces import (
    cuda,  # noqa: F401 - registers the GPU templates
    llvm,  # noqa: F401 - registers the CPU templates
)
