"""Import CrypTen 0.4.1 (the last PyPI release) on torch 2.x — the one place that does it.

Why a shim: ``crypten/nn/onnx_converter.py`` (imported by ``import crypten``) does
``from torch.onnx._internal.registration import registry`` when ``torch.onnx.symbolic_registry``
is absent; torch >= 2.6 removed that private module, so ``import crypten`` raises
``ModuleNotFoundError``. We never use CrypTen's ONNX converter (``crypten.nn.from_pytorch``
breaks on the new exporter and on pooling; privnlp builds its CrypTen models directly in
``crypten.nn``), so a stub module with a dummy ``registry`` placed into ``sys.modules`` before
the import is enough. A stub that is already there (or a real module) is left alone.

Also here:

* :func:`safe_load` — ``crypten.load`` calls ``torch.load`` whose default became
  ``weights_only=True`` in torch 2.6; CrypTen's pickles need ``weights_only=False``.
* :func:`register_safe_classes` — registers privnlp's custom modules with CrypTen's restricted
  unpickler (``crypten.common.serial.register_safe_class``) so ``crypten.load`` accepts them.

Paper: ../shared/papers/mpc-cnn-private-text-classification.txt (CrypTen implementation).
Install: ``pip install --no-deps crypten==0.4.1`` plus ``privnlp[mpc]`` (CrypTen's PyPI metadata
requires the dead ``sklearn`` package and an unpinned torchvision).
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
from typing import Any

import torch

from privnlp.core.errors import MissingDependency

__all__ = ["import_crypten", "crypten_available", "safe_load", "register_safe_classes"]

_STUB_NAME = "torch.onnx._internal.registration"
_crypten: Any = None


def _install_onnx_stub() -> None:
    if _STUB_NAME in sys.modules:
        return
    try:
        importlib.import_module(_STUB_NAME)
        return
    except Exception:  # noqa: BLE001 - the module is gone on torch >= 2.6
        pass
    stub = types.ModuleType(_STUB_NAME)
    stub.__doc__ = "privnlp stub: crypten 0.4.1 imports this removed torch-internal module"
    stub.registry = types.SimpleNamespace(is_registered_op=lambda *a, **k: False)  # type: ignore[attr-defined]
    sys.modules[_STUB_NAME] = stub


def import_crypten() -> Any:
    """Return the ``crypten`` module, importing it (through the torch-2.x shim) on first use.

    Raises :class:`~privnlp.core.errors.MissingDependency` when CrypTen is not installed.
    """
    global _crypten
    if _crypten is not None:
        return _crypten
    _install_onnx_stub()
    try:
        import crypten  # type: ignore[import-not-found]  # optional (the mpc extra): deferred
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] in ("crypten",):
            raise MissingDependency(
                "crypten", "mpc", hint="then `pip install --no-deps crypten==0.4.1`"
            ) from e
        raise MissingDependency(
            e.name or "crypten", "mpc", hint=f"CrypTen's own dependency is missing: {e}"
        ) from e
    _crypten = crypten
    return crypten


def crypten_available() -> bool:
    try:
        import_crypten()
        return True
    except MissingDependency:
        return False


def safe_load(f: Any, **kwargs: Any) -> Any:
    """``crypten.load`` with ``torch.load(weights_only=False)`` (torch >= 2.6 default changed)."""
    crypten = import_crypten()
    return crypten.load(f, load_closure=functools.partial(torch.load, weights_only=False), **kwargs)


def register_safe_classes(*classes: type) -> None:
    """Register classes with CrypTen's restricted unpickler (``crypten.common.serial``)."""
    serial = import_crypten().common.serial
    for c in classes:
        serial.register_safe_class(c)
