"""autosched: a learned auto-scheduler for deep-learning models."""
__version__ = "0.1.0"
