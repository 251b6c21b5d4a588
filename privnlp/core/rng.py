"""Random-number helpers. privnlp never touches a global RNG.

Stochastic code takes a keyword-only ``rng``: a ``numpy.random.Generator``, a
``torch.Generator`` or an ``int`` seed (converted with :func:`as_numpy`). DP noise can be
drawn in *secure mode*: :func:`secure_numpy` / :func:`secure_torch` seed from the OS
entropy pool and :func:`refuse_seeded` rejects a user-seeded generator where a deployment
demands it.
"""
from __future__ import annotations

import os
import secrets
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from .errors import InvalidArgument

if TYPE_CHECKING:  # pragma: no cover
    import torch

RngLike = Union[np.random.Generator, "torch.Generator", int]

__all__ = ["RngLike", "as_numpy", "as_torch", "spawn", "secure_numpy", "secure_torch",
           "refuse_seeded", "is_secure", "seed_of"]

_SECURE_ATTR = "_privnlp_secure"


def as_numpy(rng: Any, *, name: str = "rng") -> np.random.Generator:
    """Return a numpy Generator for ``rng`` (Generator, int seed, or torch.Generator)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    if rng is None:
        raise InvalidArgument(f"{name} is required (keyword-only): pass numpy.random.default_rng(seed) "
                              "or privnlp.core.rng.secure_numpy(); privnlp never uses a global RNG")
    try:
        import torch
        if isinstance(rng, torch.Generator):
            seed = int(torch.randint(0, 2**63 - 1, (1,), generator=rng).item())
            return np.random.default_rng(seed)
    except ImportError:  # pragma: no cover
        pass
    raise InvalidArgument(f"{name} must be a numpy.random.Generator, a torch.Generator or an int seed; got {type(rng).__name__}")


def as_torch(rng: Any, *, name: str = "rng", device: str = "cpu") -> "torch.Generator":
    """Return a torch.Generator for ``rng`` (torch.Generator, int seed, or numpy Generator)."""
    import torch

    if isinstance(rng, torch.Generator):
        return rng
    g = torch.Generator(device=device)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        g.manual_seed(int(rng))
        return g
    if isinstance(rng, np.random.Generator):
        g.manual_seed(int(rng.integers(0, 2**63 - 1)))
        return g
    if rng is None:
        raise InvalidArgument(f"{name} is required (keyword-only): pass torch.Generator().manual_seed(seed) "
                              "or privnlp.core.rng.secure_torch()")
    raise InvalidArgument(f"{name} must be a torch.Generator, numpy.random.Generator or int seed; got {type(rng).__name__}")


def spawn(rng: Any, n: int) -> list[np.random.Generator]:
    """Split ``rng`` into ``n`` independent numpy Generators (for seeds/batches/parties)."""
    g = as_numpy(rng)
    return [np.random.default_rng(s) for s in g.bit_generator.seed_seq.spawn(n)] if hasattr(g.bit_generator, "seed_seq") \
        else [np.random.default_rng(int(g.integers(0, 2**63 - 1))) for _ in range(n)]


def seed_of(rng: Any) -> int:
    """Draw an int seed from ``rng`` (for libraries that only take seeds)."""
    return int(as_numpy(rng).integers(0, 2**31 - 1))


def secure_numpy() -> np.random.Generator:
    """A numpy Generator seeded from the OS entropy pool (256 bits); it refuses to be reseeded by us."""
    g = np.random.Generator(np.random.PCG64DXSM(secrets.randbits(256)))
    setattr(g, _SECURE_ATTR, True) if hasattr(g, "__dict__") else None
    _SECURE_IDS.add(id(g))
    return g


def secure_torch(device: str = "cpu") -> "torch.Generator":
    """A torch.Generator seeded from ``os.urandom``."""
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1))
    _SECURE_IDS.add(id(g))
    return g


_SECURE_IDS: set[int] = set()


def is_secure(rng: Any) -> bool:
    """Whether ``rng`` was created by :func:`secure_numpy` / :func:`secure_torch`."""
    return id(rng) in _SECURE_IDS


def refuse_seeded(rng: Any, *, name: str = "rng") -> Any:
    """In secure mode: raise unless ``rng`` came from the OS entropy pool."""
    if not is_secure(rng):
        raise InvalidArgument(f"{name}: secure mode refuses seeded generators; pass privnlp.core.rng.secure_numpy() "
                              "or secure_torch()")
    return rng
