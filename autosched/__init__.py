"""autosched: a learned auto-scheduler for deep-learning models."""
__version__ = "0.1.0"

_LAZY = {"tune_task": "autosched.tuner.api", "TuneResult": "autosched.tuner.api", "tune": "autosched.api",
         "build": "autosched.api", "TuneInterrupted": "autosched.api", "Database": "autosched.database"}


def __getattr__(name: str):
    """`autosched.tune`, `autosched.build`, `autosched.tune_task` and the rest without importing
    the tuners (XGBoost, scikit-learn) on `import autosched`."""
    import importlib
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'autosched' has no attribute {name!r}")
