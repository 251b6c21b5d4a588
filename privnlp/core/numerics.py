"""Reproducible CPU numerics: pinned torch threads and the environment a number depends on.

Why (issue #17): float reductions in torch's CPU kernels (matmul, layer-norm and embedding
backward) are split across intra-op threads, so their summation order -- and the last bits of
the result -- depend on ``torch.get_num_threads()`` (``OMP_NUM_THREADS``, or the core count when
it is unset). Training the bundled models for 80-100 steps amplifies those bits into different
weights, and gradient-inversion attacks (LAMP's discrete search) turn different weights into
different reconstructions: the same code gave LAMP ROUGE-2 0.182 with 1 thread and 0.000 with 2.
Every model build and every audit therefore runs inside :func:`pinned_threads` (1 thread unless
``PRIVNLP_TORCH_THREADS`` says otherwise), and the thread count, the CPU kernel family
(``torch.backends.cpu.get_cpu_capability()``) and the library versions go into the cache keys and
the reports (:func:`environment`). No torch import at module level.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from privnlp.core.errors import InvalidArgument

__all__ = [
    "eval_threads",
    "pinned_threads",
    "environment",
    "numerics_fingerprint",
    "source_fingerprint",
]

#: CPU flags that select different SIMD kernels in torch / oneDNN (others do not change numbers)
_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "sve",
)


def eval_threads() -> int:
    """Threads used for model builds and audits: ``$PRIVNLP_TORCH_THREADS`` (default 1)."""
    raw = os.environ.get("PRIVNLP_TORCH_THREADS", "1")
    try:
        n = int(raw)
    except ValueError:
        raise InvalidArgument(
            f"PRIVNLP_TORCH_THREADS must be a positive integer; got {raw!r}"
        ) from None
    if n < 1:
        raise InvalidArgument(f"PRIVNLP_TORCH_THREADS must be a positive integer; got {raw!r}")
    return n


@contextlib.contextmanager
def pinned_threads(n: int | None = None) -> Iterator[int]:
    """Run the body with ``torch.set_num_threads(n)`` (default :func:`eval_threads`); restore afterwards."""
    import torch  # deferred: torch: core stays torch-free

    n = eval_threads() if n is None else int(n)
    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield n
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def _cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    have = set(line.split(":", 1)[1].split())
                    return [x for x in _FLAGS if x in have]
    except OSError:
        pass
    return []


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def numerics_fingerprint() -> dict[str, Any]:
    """What decides the bits of a CPU result besides the code and the seed: pinned thread count,
    torch's CPU kernel family, and the versions of torch / transformers / tokenizers / numpy."""

    import torch  # deferred: torch: core stays torch-free

    out: dict[str, Any] = {
        "torch_threads": eval_threads(),
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
    }
    for pkg in ("torch", "transformers", "tokenizers", "numpy"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:  # pragma: no cover
            out[pkg] = "missing"
    return out


def environment() -> dict[str, Any]:
    """The environment recorded in every report: :func:`numerics_fingerprint` plus CPU model and
    SIMD flags (from ``/proc/cpuinfo``), core count, ``OMP_NUM_THREADS`` and the Python/OS version."""
    env = numerics_fingerprint()
    env.update(
        {
            "cpu_model": _cpu_model(),
            "cpu_flags": " ".join(_cpu_flags()),
            "cpu_count": os.cpu_count(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "unset"),
            "python": platform.python_version(),
            "platform": platform.platform(terse=True),
        }
    )
    return env


_SOURCE_IDS: dict[tuple[str, ...], str] = {}


def source_fingerprint(*subpackages: str) -> str:
    """sha256 (16 hex) of privnlp's own ``.py`` sources under ``subpackages`` (e.g. ``"models", "data"``;
    none = the whole package), computed once per process: cached results built by older code are
    never reused (the version string alone does not change while developing)."""

    key = tuple(sorted(subpackages))
    if key not in _SOURCE_IDS:
        root = Path(__file__).resolve().parent.parent
        dirs = [root / s for s in key] if key else [root]
        h = hashlib.sha256()
        for d in dirs:
            files = sorted(d.rglob("*.py")) if d.is_dir() else [d.with_suffix(".py")]
            for f in files:
                if f.exists() and "__pycache__" not in f.parts:
                    h.update(f.relative_to(root).as_posix().encode())
                    h.update(hashlib.sha256(f.read_bytes()).digest())
        _SOURCE_IDS[key] = h.hexdigest()[:16]
    return _SOURCE_IDS[key]
