"""autosched: a learned auto-scheduler for deep-learning models."""
__version__ = "0.1.0"

_LAZY = {"tune_task": "autosched.tuner.api", "TuneResult": "autosched.tuner.api", "tune": "autosched.api",
         "TuneInterrupted": "autosched.api", "Database": "autosched.database"}


def __getattr__(name: str):
    """`autosched.tune`, `autosched.tune_task` and the rest without importing the tuners (XGBoost,
    scikit-learn) on `import autosched`. `autosched.build` is the module `autosched/build.py`,
    which is callable: `autosched.build(model, target, db=...)` runs `autosched.api.build`."""
    import importlib
    if name == "build":
        return importlib.import_module("autosched.build")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'autosched' has no attribute {name!r}")
