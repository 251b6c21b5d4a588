"""privnlp — a defense-first privacy toolkit for NLP.

Every defense ("mechanism") ships with its privacy claim *and* its measured leakage: the
attacks from the literature are built in as evaluators.

Importing ``privnlp`` is light (no torch); subpackages load on first use::

    import privnlp
    privnlp.mechanisms.get("vickrey")
    privnlp.attacks.get("film")

One entry point per job, re-exported lazily (the module that defines it, and torch where it needs it,
load on first access):

* private training: ``privnlp.DPEngine`` (grouped options, as opacus' ``PrivacyEngine``) and
  ``privnlp.make_private`` (a thin function over it), ``privnlp.train_private`` (the loop);
* sanitizing: ``privnlp.sanitize_file`` (a dataset file through a text mechanism, claim in a sidecar);
* auditing: ``privnlp.audit`` (a defense against its paired attacks -> ``LeakageReport``) and
  ``privnlp.evaluate_defense`` (the same plus the report files and the card).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBPACKAGES = (
    "core",
    "accounting",
    "data",
    "models",
    "metrics",
    "mechanisms",
    "attacks",
    "auditing",
    "evaluation",
    "cli",
)

#: name -> (module, attribute): the entry points, imported on first access
_ENTRY_POINTS = {
    "DPEngine": ("privnlp.mechanisms.training.engine", "DPEngine"),
    "make_private": ("privnlp.mechanisms.training", "make_private"),
    "train_private": ("privnlp.mechanisms.training", "train_private"),
    "sanitize_file": ("privnlp.mechanisms.text.files", "sanitize_file"),
    "audit": ("privnlp.evaluation", "audit"),
    "evaluate_defense": ("privnlp.evaluation.cards", "evaluate_defense"),
}

# a literal list (tests/docs/test_layering.py); every name here must resolve in a clean clone
__all__ = [
    "__version__",
    "DPEngine",
    "make_private",
    "train_private",
    "sanitize_file",
    "audit",
    "evaluate_defense",
    "core",
    "accounting",
    "data",
    "models",
    "metrics",
    "mechanisms",
    "attacks",
    "auditing",
    "evaluation",
    "cli",
]


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"privnlp.{name}")
    if name in _ENTRY_POINTS:
        module, attr = _ENTRY_POINTS[name]
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:  # a dependency of the module is missing: say which
                raise
            raise AttributeError(f"privnlp.{name}: its module {module} is not installed") from e
        value = getattr(mod, attr)
        globals()[name] = value  # later accesses skip __getattr__
        return value
    raise AttributeError(f"module 'privnlp' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
