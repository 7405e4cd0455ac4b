"""Schedule templates per op and target: the search spaces the tuners explore."""
from search_spaces.registry import Template, TemplateError, get_template, register, templates

__all__ = ["Template", "TemplateError", "get_template", "register", "templates"]
