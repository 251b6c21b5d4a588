"""Random-number helpers. privnlp never touches a global RNG.

Stochastic code takes a keyword-only ``rng``: a ``numpy.random.Generator``, a
``torch.Generator`` or an ``int`` seed (converted with :func:`as_numpy`). DP noise can be
drawn in *secure mode*: :func:`secure_numpy` / :func:`secure_torch` seed from the OS
entropy pool and :func:`refuse_seeded` rejects a user-seeded generator where a deployment
demands it.

Privacy noise (the rule): noise that a guarantee rests on comes from the OS entropy pool unless the
user explicitly passes ``rng=`` a seed or Generator for a reproducible simulation in one process;
:func:`noise_torch` / :func:`noise_numpy` implement it (``None`` or a :func:`secure_numpy` /
:func:`secure_torch` generator -> fresh OS entropy; anything else -> seeded, and the claim must then
set ``noise_seeded=True``). A seed that crosses a party boundary never seeds privacy noise.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from .errors import InvalidArgument

if TYPE_CHECKING:  # pragma: no cover
    import torch

RngLike = Union[np.random.Generator, "torch.Generator", int]

__all__ = [
    "RngLike",
    "as_numpy",
    "as_torch",
    "spawn",
    "secure_numpy",
    "secure_torch",
    "refuse_seeded",
    "is_secure",
    "seed_of",
    "noise_is_seeded",
    "noise_torch",
    "noise_numpy",
    "generator_on",
    "check_noise_seed_allowed",
    "REFUSE_SEEDED_ENV",
]


def as_numpy(rng: Any, *, name: str = "rng") -> np.random.Generator:
    """Return a numpy Generator for ``rng`` (Generator, int seed, or torch.Generator)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    if rng is None:
        raise InvalidArgument(
            f"{name} is required (keyword-only): pass numpy.random.default_rng(seed) "
            "or privnlp.core.rng.secure_numpy(); privnlp never uses a global RNG"
        )
    try:
        import torch

        if isinstance(rng, torch.Generator):
            seed = int(torch.randint(0, 2**63 - 1, (1,), generator=rng).item())
            return np.random.default_rng(seed)
    except ImportError:  # pragma: no cover
        pass
    raise InvalidArgument(
        f"{name} must be a numpy.random.Generator, a torch.Generator or an int seed; got {type(rng).__name__}"
    )


def as_torch(rng: Any, *, name: str = "rng", device: str = "cpu") -> torch.Generator:
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
        raise InvalidArgument(
            f"{name} is required (keyword-only): pass torch.Generator().manual_seed(seed) "
            "or privnlp.core.rng.secure_torch()"
        )
    raise InvalidArgument(
        f"{name} must be a torch.Generator, numpy.random.Generator or int seed; got {type(rng).__name__}"
    )


def spawn(rng: Any, n: int) -> list[np.random.Generator]:
    """Split ``rng`` into ``n`` independent numpy Generators (for seeds/batches/parties)."""
    g = as_numpy(rng)
    return (
        [np.random.default_rng(s) for s in g.bit_generator.seed_seq.spawn(n)]
        if hasattr(g.bit_generator, "seed_seq")
        else [np.random.default_rng(int(g.integers(0, 2**63 - 1))) for _ in range(n)]
    )


def seed_of(rng: Any) -> int:
    """Draw an int seed from ``rng`` (for libraries that only take seeds)."""
    return int(as_numpy(rng).integers(0, 2**31 - 1))


#: process-local key of the seed tags below: a tag reveals nothing about the seed it was made from
_TAG_KEY = secrets.token_bytes(32)


def _seed_tag(seed: int) -> bytes:
    return hashlib.blake2b(int(seed).to_bytes(8, "little"), key=_TAG_KEY, digest_size=16).digest()


class _SecureBitGenerator(np.random.PCG64DXSM):
    """PCG64DXSM seeded from the OS entropy pool whose state cannot be assigned (a caller who sets it has
    made a seeded generator: issue #28 item 6)."""

    @property
    def state(self) -> dict:
        return np.random.PCG64DXSM.state.__get__(self)

    @state.setter
    def state(self, value: dict) -> None:
        raise InvalidArgument(
            "rng: a secure_numpy() generator cannot be re-seeded (its state is OS entropy); make a seeded "
            "simulation with numpy.random.default_rng(seed) instead"
        )


class _SecureNumpyGenerator(np.random.Generator):
    """Marker type of :func:`secure_numpy` generators (an id() registry would misfire once ids are reused).
    A copy (``copy.deepcopy``, pickle) replays this generator's draws, so it is an ordinary seeded generator."""

    def __reduce__(self) -> tuple:
        plain = np.random.PCG64DXSM()
        plain.state = {**self.bit_generator.state, "bit_generator": "PCG64DXSM"}
        return (np.random.Generator, (plain,))


_SECURE_TORCH_TYPE: Any = None


def _secure_torch_type() -> Any:
    global _SECURE_TORCH_TYPE
    if _SECURE_TORCH_TYPE is None:
        import torch

        class _SecureTorchGenerator(torch.Generator):
            """Marker type of :func:`secure_torch` generators. Re-seeding one (``manual_seed``, ``seed``,
            ``set_state``) makes it an ordinary seeded generator: :func:`is_secure` then says ``False``, and it
            checks the generator's current seed as well, so a re-seed through ``torch.Generator.manual_seed(g,
            s)`` is caught too (issue #28 item 6)."""

            def manual_seed(self, seed: int) -> Any:
                self._privnlp_reseeded = True
                return super().manual_seed(seed)

            def seed(self) -> int:
                self._privnlp_reseeded = True
                return super().seed()

            def set_state(self, new_state: Any) -> Any:
                self._privnlp_reseeded = True
                return super().set_state(new_state)

        _SECURE_TORCH_TYPE = _SecureTorchGenerator
    return _SECURE_TORCH_TYPE


def secure_numpy() -> np.random.Generator:
    """A numpy Generator seeded from the OS entropy pool (256 bits); its state cannot be re-assigned."""
    return _SecureNumpyGenerator(_SecureBitGenerator(secrets.randbits(256)))


def secure_torch(device: Any = "cpu") -> torch.Generator:
    """A torch.Generator on ``device`` seeded from ``os.urandom`` (63 bits; one per call, so per device and per
    process). Re-seeding it makes it a seeded generator (:func:`is_secure` is then ``False``)."""
    import torch

    g = _secure_torch_type()(device=device)
    seed = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
    torch.Generator.manual_seed(g, seed)  # the base method: this seeding is the secure one
    g._privnlp_tag = _seed_tag(seed)
    return g


def is_secure(rng: Any) -> bool:
    """Whether ``rng`` is a :func:`secure_numpy` / :func:`secure_torch` generator that still holds its OS
    entropy: judged by what it is now (its type and, for torch, its current seed), not by how it was made --
    a secure generator the caller re-seeded (``secure_torch().manual_seed(1234)``, ``set_state``) is not."""
    if isinstance(rng, _SecureNumpyGenerator):
        return type(rng.bit_generator) is _SecureBitGenerator
    if _SECURE_TORCH_TYPE is None or not isinstance(rng, _SECURE_TORCH_TYPE):
        return False
    if getattr(rng, "_privnlp_reseeded", False):
        return False
    tag = getattr(rng, "_privnlp_tag", None)
    return tag is not None and hmac.compare_digest(tag, _seed_tag(rng.initial_seed()))


def refuse_seeded(rng: Any, *, name: str = "rng") -> Any:
    """In secure mode: raise unless ``rng`` came from the OS entropy pool."""
    if not is_secure(rng):
        raise InvalidArgument(
            f"{name}: secure mode refuses seeded generators; pass privnlp.core.rng.secure_numpy() "
            "or secure_torch()"
        )
    return rng


def noise_is_seeded(rng: Any) -> bool:
    """Whether privacy noise drawn for ``rng`` is reproducible by whoever knows the seed: ``False`` for
    ``None`` (OS entropy) and for :func:`secure_numpy` / :func:`secure_torch` generators."""
    return rng is not None and not is_secure(rng)


#: deployments set this environment variable to ``1`` to refuse seeded privacy noise everywhere
REFUSE_SEEDED_ENV = "PRIVNLP_REFUSE_SEEDED_NOISE"


def check_noise_seed_allowed(rng: Any) -> None:
    if noise_is_seeded(rng) and os.environ.get(REFUSE_SEEDED_ENV, "") not in ("", "0"):
        raise InvalidArgument(
            f"rng: {REFUSE_SEEDED_ENV} is set, so privacy noise may not be seeded; pass rng=None "
            "(OS entropy) or unset the variable for a reproducible simulation"
        )


def noise_torch(rng: Any, n: int = 1, *, device: str = "cpu") -> tuple[list[torch.Generator], bool]:
    """``n`` independent torch Generators for privacy noise and whether they are seeded.

    ``rng=None`` (or a secure generator): each seeded from ``os.urandom`` (not reproducible, never
    replayed). A seed / Generator: split deterministically (reproducible simulation); refused when the
    environment variable ``PRIVNLP_REFUSE_SEEDED_NOISE=1`` is set (secure mode for deployments)."""
    check_noise_seed_allowed(rng)
    if not noise_is_seeded(rng):
        return [secure_torch(device) for _ in range(n)], False
    return [as_torch(g, device=device) for g in spawn(rng, n)], True


def noise_numpy(rng: Any, n: int = 1) -> tuple[list[np.random.Generator], bool]:
    """``n`` independent numpy Generators for privacy noise and whether they are seeded (see
    :func:`noise_torch`)."""
    check_noise_seed_allowed(rng)
    if not noise_is_seeded(rng):
        return [secure_numpy() for _ in range(n)], False
    return spawn(rng, n), True


def generator_on(g: torch.Generator, device: Any, *, seeded: bool) -> torch.Generator:
    """A generator for privacy noise on ``device`` (where the parameters live; torch draws noise only from a
    generator on the tensor's device) from ``g``, a CPU generator of :func:`noise_torch`.

    CPU: ``g`` itself. Another device: a secure run gets :func:`secure_torch` on that device (fresh OS entropy per
    device and per process); a seeded simulation gets a generator on that device seeded from ``g`` (reproducible on
    the same device kind; a CUDA and a CPU run draw different noise from one seed).

    Raises:
        InvalidArgument: torch cannot create a generator on ``device`` (e.g. ``meta``).
    """
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return g
    try:
        if not seeded:
            return secure_torch(dev)
        h = torch.Generator(device=dev)
    except (RuntimeError, TypeError) as e:
        raise InvalidArgument(
            f"model: its parameters are on device {dev}, where torch cannot create a random generator for the "
            f"privacy noise ({e}); train on cpu or cuda"
        ) from e
    h.manual_seed(int(torch.randint(0, 2**63 - 1, (1,), generator=g).item()))
    return h
