"""One registry mechanism, for mechanisms, attacks and scenarios: plain dicts filled by decorators.

>>> from privnlp.core.registry import MECHANISMS
>>> @MECHANISMS.register("my_defense")       # doctest: +SKIP
... class MyDefense(Mechanism): ...
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from .errors import InvalidArgument

__all__ = ["Registry", "MECHANISMS", "ATTACKS", "SCENARIOS", "LEAKY_TWINS", "AUDITS"]

T = TypeVar("T")


class Registry(dict):
    """A name -> class dict. ``modules`` are imported lazily on first lookup, so that
    ``import privnlp`` stays light and registration happens where the code lives.

    Args:
        kind: what is registered (``"mechanism"``, ``"attack"``, ...), used in error messages.
        modules: dotted module names imported on the first lookup; an ``ImportError`` (a missing optional
            dependency) is recorded in ``import_errors`` rather than raised.

    Raises:
        InvalidArgument: (``register``) the name is already taken by a different object; (``get``) the name
            is unknown.
    """

    def __init__(self, kind: str, modules: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.kind = kind
        self.modules = list(modules)
        self._loaded = False
        self.import_errors: dict[str, str] = {}

    def register(self, name: str, **metadata: Any) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self and self[name] is not obj:
                prev = self[name]
                if getattr(prev, "__qualname__", None) != getattr(
                    obj, "__qualname__", None
                ) or getattr(prev, "__module__", None) != getattr(obj, "__module__", None):
                    raise InvalidArgument(f"{self.kind} {name!r} is already registered by {prev!r}")
            try:
                obj.name = name
                for k, v in metadata.items():
                    setattr(obj, k, v)
            except (AttributeError, TypeError):  # pragma: no cover - functions with slots
                pass
            dict.__setitem__(self, name, obj)
            return obj

        return deco

    def load_all(self) -> Registry:
        if not self._loaded:
            self._loaded = True
            for mod in self.modules:
                try:
                    importlib.import_module(mod)
                except ImportError as e:  # an optional dependency is missing
                    self.import_errors[mod] = f"{type(e).__name__}: {e}"
        return self

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self.load_all()
        if name not in self:
            if default is not None:
                return default
            known = ", ".join(sorted(self)) or "(none)"
            raise InvalidArgument(f"unknown {self.kind} {name!r}; known: {known}")
        return dict.__getitem__(self, name)

    def names(self) -> list[str]:
        self.load_all()
        return sorted(self)

    def items_loaded(self) -> Iterator[tuple[str, Any]]:
        self.load_all()
        return iter(sorted(dict.items(self)))


# Modules that register entries; each issue's code adds its module here.
MECHANISMS = Registry(
    "mechanism",
    (
        "privnlp.mechanisms.testing",
        "privnlp.mechanisms.training",
        "privnlp.mechanisms.federated",
        "privnlp.mechanisms.text",
        "privnlp.mechanisms.vocab",
        "privnlp.mechanisms.fragmentation",
        "privnlp.mechanisms.mpc",
        "privnlp.mechanisms.pii",
    ),
)
ATTACKS = Registry(
    "attack",
    (
        "privnlp.attacks.gradient",
        "privnlp.attacks.memorization",
        "privnlp.attacks.text",
        "privnlp.attacks.mpc",
        "privnlp.attacks.pii",
    ),
)
SCENARIOS = Registry("scenario", ("privnlp.evaluation.scenarios",))
# Deliberately leaky twins, keyed by the name of the real mechanism they imitate
# (registered next to the mechanism, re-exported by privnlp.mechanisms.testing).
LEAKY_TWINS = Registry("leaky twin", MECHANISMS.modules)
# Empirical DP audits (issue #18), keyed by the name of the DP defense they audit; each entry is a
# function ``(cls, *, name, system, preset, seed, confidence) -> list[DPAuditResult]`` (privnlp.auditing).
AUDITS = Registry("dp audit", ("privnlp.auditing.audits",))
