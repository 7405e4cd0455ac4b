"""Templates, registered once by (op, target kind) and looked up by the measure and tuning code.

The core owns this registry; the built-in templates live in the `search_spaces` package, which
imports the core and so cannot be imported by it at module level. The registry loads that package
itself, once, on the first lookup or registration: the one place the core names it.

A template is a pair of pure functions: `space(task, target) -> ConfigSpace` says which
schedules exist, `apply(task, config, target) -> (Schedule, tensors)` builds one of them, the
tensors being the kernel's arguments (the task's inputs in order, then its output). No global
dispatch context: callers pass the config they mean.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from autosched.errors import AutoschedError


class TemplateError(AutoschedError):
    """No template fits, or a template was registered twice."""


class Template(Protocol):
    name: str

    def space(self, task, target): ...

    def fallback(self, task, target): ...  # the untuned build's config, or None

    def apply(self, task, config, target) -> tuple: ...

    # optional: canonical(task, config, target) -> Config, the config of the same kernel that
    # tuners measure for it, and valid(task, config, target) -> bool, whether `apply` builds the
    # config, judged without building it (`config_filter`)


def config_filter(template: Template, task, target) -> Callable[[Any], Any] | None:
    """What tuners measure for a proposed config of `task` on `target` (`Tuner.restrict`): its
    canonical config where the template has one, None where the template refuses it; None
    where the template has neither check."""
    canonical, valid = getattr(template, "canonical", None), getattr(template, "valid", None)
    if canonical is None and valid is None:
        return None

    def admit(config):
        config = canonical(task, config, target) if canonical is not None else config
        return config if valid is None or valid(task, config, target) else None
    return admit


_TEMPLATES: dict[tuple[str, str], Template] = {}
_BUILTIN_PACKAGE = "search_spaces"
_builtins_loaded = False


def _load_builtins() -> None:
    """Import the built-in templates' package, whose modules register themselves here. Marked loaded
    before the import so their `register` calls, made while it runs, do not start it again."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    _builtins_loaded = True
    try:
        importlib.import_module(_BUILTIN_PACKAGE)
    except BaseException:
        _builtins_loaded = False
        raise


def register(op: str, target_kind: str, template: Template, replace: bool = False) -> Template:
    """Add a template; the built-ins are loaded first, so a caller's `replace=True` overrides them
    rather than being refused by them later."""
    _load_builtins()
    key = (op, target_kind)
    if key in _TEMPLATES and not replace:
        raise TemplateError(f"a template for op {op!r} on {target_kind!r} is already registered "
                            f"({_TEMPLATES[key].name})")
    _TEMPLATES[key] = template
    return template


def get_template(op: str, target_kind: str) -> Template:
    _load_builtins()
    try:
        return _TEMPLATES[(op, target_kind)]
    except KeyError:
        known = ", ".join(f"{o}@{t}" for o, t in sorted(_TEMPLATES)) or "none"
        raise TemplateError(f"no template for op {op!r} on target {target_kind!r}; registered: {known}") from None


def templates() -> dict[tuple[str, str], Template]:
    _load_builtins()
    return dict(_TEMPLATES)
