"""One registry mechanism, for mechanisms, attacks and scenarios: plain dicts filled by decorators.

>>> from privnlp.core.registry import MECHANISMS
>>> @MECHANISMS.register("my_defense")       # doctest: +SKIP
... class MyDefense(Mechanism): ...
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from .errors import InvalidArgument, RegistryImportError

__all__ = ["Registry", "MECHANISMS", "ATTACKS", "SCENARIOS", "LEAKY_TWINS", "AUDITS"]

#: ``@SOMETHING.register("name"`` in a module's source: the names a module would register
_REGISTER = re.compile(r"""\.register\(\s*["']([^"']+)["']""")

T = TypeVar("T")


class Registry(dict):
    """A name -> class dict. ``modules`` are imported lazily on first lookup, so that
    ``import privnlp`` stays light and registration happens where the code lives.

    Args:
        kind: what is registered (``"mechanism"``, ``"attack"``, ...), used in error messages.
        modules: dotted module names imported on the first lookup; an ``ImportError`` (a missing optional
            dependency, a broken import) is recorded in ``import_errors`` (module -> the exception) rather than
            raised, so the other modules' entries stay usable. Asking for an entry that the failed module
            registers (found in its source) raises that error, naming the module.

    Raises:
        InvalidArgument: (``register``) the name is already taken by a different object; (``get``) the name
            is unknown (the message lists the modules that failed to import, if any).
        RegistryImportError: (``get``) the name is registered by a module that failed to import; the
            original ``ImportError`` is its ``__cause__``.
    """

    def __init__(self, kind: str, modules: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.kind = kind
        self.modules = list(modules)
        self._loaded = False
        self.import_errors: dict[str, ImportError] = {}

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
                except (
                    ImportError
                ) as e:  # an optional dependency is missing, or an import is broken
                    self.import_errors[mod] = e
        return self

    def failed_module_for(self, name: str) -> str | None:
        """The module that failed to import and whose source registers ``name`` (``None`` if none)."""
        for mod in self.import_errors:
            if name in _registered_in_source(mod):
                return mod
        return None

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        self.load_all()
        if name not in self:
            if default is not None:
                return default
            mod = self.failed_module_for(name)
            if mod is not None:
                err = self.import_errors[mod]
                raise RegistryImportError(
                    f"{self.kind} {name!r} is unavailable: importing its module {mod!r} failed with "
                    f"{type(err).__name__}: {err}",
                    module=mod,
                    name=name,
                ) from err
            known = ", ".join(sorted(self)) or "(none)"
            msg = f"unknown {self.kind} {name!r}; known: {known}"
            if self.import_errors:
                failed = "; ".join(
                    f"{m} ({type(e).__name__}: {e})" for m, e in self.import_errors.items()
                )
                msg += f". Modules that failed to import: {failed}"
            raise InvalidArgument(msg)
        return dict.__getitem__(self, name)

    def names(self) -> list[str]:
        self.load_all()
        return sorted(self)

    def items_loaded(self) -> Iterator[tuple[str, Any]]:
        self.load_all()
        return iter(sorted(dict.items(self)))


def _registered_in_source(module: str) -> set[str]:
    """Names a module (and, for a package, its submodules) registers, read from the source without
    importing it (it failed to import)."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return set()
    if spec is None or spec.origin is None:
        return set()
    origin = Path(spec.origin)
    files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
    names: set[str] = set()
    for f in files:
        try:
            names.update(_REGISTER.findall(f.read_text(encoding="utf-8")))
        except OSError:  # pragma: no cover - unreadable source
            continue
    return names


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
# one module per scenario family, imported on the first lookup (a test keeps this list equal to the
# package's modules): importing the package itself imports none of them
SCENARIOS = Registry(
    "scenario",
    tuple(
        f"privnlp.evaluation.scenarios.{m}"
        for m in (
            "federated",
            "fragmentation",
            "gradient",
            "memorization",
            "mpc",
            "pii",
            "text",
            "vocab",
        )
    ),
)
# Deliberately leaky twins, keyed by the name of the real mechanism they imitate
# (registered next to the mechanism, re-exported by privnlp.mechanisms.testing).
LEAKY_TWINS = Registry("leaky twin", MECHANISMS.modules)
# Empirical DP audits (issue #18), keyed by the name of the DP defense they audit; each entry is a
# function ``(cls, *, name, system, preset, seed, confidence) -> list[DPAuditResult]`` (privnlp.auditing).
AUDITS = Registry("dp audit", ("privnlp.auditing.audits",))
