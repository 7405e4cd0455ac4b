"""autosched: a learned auto-scheduler for deep-learning models."""
__version__ = "0.1.0"

_LAZY = {"tune_task": "autosched.tuner.api", "TuneResult": "autosched.tuner.api"}


def __getattr__(name: str):
    """`autosched.tune_task` without importing the tuners (XGBoost, scikit-learn) on `import autosched`."""
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'autosched' has no attribute {name!r}")
