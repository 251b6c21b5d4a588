"""Composable transforms of what a client sends: ``dict[name -> tensor]`` in, new dict out.

Defenses against gradient-leakage attacks, applied to a gradient / model update before it is
transmitted (central training or federated clients):

* :class:`GradientPruning` — keep the top ``keep_fraction`` entries by magnitude (Zhu et al. 2019,
  evaluated in ``../shared/papers/film-recovering-private-text-in-fl.txt``; prune ratio = 1 - keep).
* :class:`SignSGD` — send only the sign (``../shared/papers/rlg-revealing-labels-from-gradients.txt``).
* :class:`GradDrop` — zero the ``drop_fraction`` smallest entries by absolute value (Aji & Heafield,
  evaluated in the RLG paper with 50% / 90%).
* :class:`GaussianNoise` — add N(0, std^2) to every entry (``lamp-extracting-text-from-gradients.txt``;
  with clipping this is the DP-SGD noise step, but *without* accounting it is a heuristic).
* :class:`RandomMasking` — zero each entry independently with probability ``mask_fraction`` (LAMP App. C.2).
* :class:`ClipUpdate` — scale the whole update to global L2 norm <= ``max_norm``.
* :class:`Compose` — apply several in order.

Every transform is a frozen dataclass; ``t(grads, *, rng=None)`` returns a new dict and never
mutates its input. Stochastic transforms (``stochastic = True``) require keyword-only ``rng``
(int seed, numpy or torch Generator). None of them has a formal guarantee (claim kind heuristic).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from privnlp.core.errors import InvalidArgument, check_positive, check_probability, check_range
from privnlp.core.rng import as_torch, spawn

__all__ = [
    "UpdateTransform",
    "GradientPruning",
    "SignSGD",
    "GradDrop",
    "GaussianNoise",
    "RandomMasking",
    "ClipUpdate",
    "Compose",
    "apply_to_model_grads",
    "global_norm",
]

Grads = Mapping[str, torch.Tensor]


def _check_grads(grads: Grads) -> dict[str, torch.Tensor]:
    if not isinstance(grads, Mapping):
        raise InvalidArgument(f"grads must be a mapping name -> tensor; got {type(grads).__name__}")
    out = {}
    for k, v in grads.items():
        if not isinstance(v, torch.Tensor):
            raise InvalidArgument(f"grads[{k!r}] must be a torch.Tensor; got {type(v).__name__}")
        out[k] = v
    return out


def global_norm(grads: Grads) -> float:
    """L2 norm of all tensors concatenated."""
    g = _check_grads(grads)
    if not g:
        return 0.0
    return float(torch.sqrt(sum((v.detach().double() ** 2).sum() for v in g.values())))


def _keep_top(
    grads: dict[str, torch.Tensor], keep_fraction: float, scope: str
) -> dict[str, torch.Tensor]:
    """Zero all but the ``keep_fraction`` largest-|g| entries (globally or per tensor). Ties at the
    threshold are kept (at least ``ceil(keep * n)`` entries survive)."""
    if scope not in ("global", "per_tensor"):
        raise InvalidArgument(f"scope must be 'global' or 'per_tensor'; got {scope!r}")
    if keep_fraction >= 1.0:
        return {k: v.clone() for k, v in grads.items()}
    if scope == "per_tensor":
        out = {}
        for k, v in grads.items():
            n = v.numel()
            keep = int(math.ceil(keep_fraction * n))
            if keep <= 0 or n == 0:
                out[k] = torch.zeros_like(v)
                continue
            thr = v.detach().abs().flatten().kthvalue(n - keep + 1).values
            out[k] = torch.where(v.abs() >= thr, v, torch.zeros_like(v))
        return out
    flat = (
        torch.cat([v.detach().abs().flatten().float() for v in grads.values()])
        if grads
        else torch.zeros(0)
    )
    n = flat.numel()
    keep = int(math.ceil(keep_fraction * n))
    if keep <= 0 or n == 0:
        return {k: torch.zeros_like(v) for k, v in grads.items()}
    thr = flat.kthvalue(n - keep + 1).values
    return {
        k: torch.where(v.abs().float() >= thr, v, torch.zeros_like(v)) for k, v in grads.items()
    }


class UpdateTransform(abc.ABC):
    """Base class: ``__call__(grads, *, rng=None) -> dict``; ``stochastic`` says whether rng is needed."""

    stochastic: ClassVar[bool] = False

    def __call__(self, grads: Grads, *, rng: Any = None) -> dict[str, torch.Tensor]:
        g = _check_grads(grads)
        if self.stochastic and rng is None:
            raise InvalidArgument(
                f"{type(self).__name__} is stochastic: pass keyword-only rng "
                "(int seed, numpy.random.Generator or torch.Generator)"
            )
        return self._apply(g, rng)

    @abc.abstractmethod
    def _apply(self, grads: dict[str, torch.Tensor], rng: Any) -> dict[str, torch.Tensor]:
        """Return the transformed copy of ``grads``."""

    def __rshift__(self, other: UpdateTransform) -> Compose:
        return Compose(self, other)

    @property
    def label(self) -> str:
        """Short description used as ``GradientObservation.transform``."""
        args = ",".join(f"{k}={v}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


@dataclass(frozen=True)
class GradientPruning(UpdateTransform):
    """Keep the ``keep_fraction`` largest entries by magnitude, zero the rest (prune ratio = 1 - keep).

    Attributes:
        keep_fraction: the fraction of entries kept, in [0, 1].
        scope: ``"per_tensor"`` or ``"global"`` (where the magnitude threshold is computed).

    Raises:
        InvalidArgument: ``keep_fraction`` outside [0, 1] or an unknown ``scope``.
    """

    keep_fraction: float = 0.1
    scope: str = "per_tensor"

    def __post_init__(self) -> None:
        check_probability("keep_fraction", self.keep_fraction)
        if self.scope not in ("global", "per_tensor"):
            raise InvalidArgument(f"scope must be 'global' or 'per_tensor'; got {self.scope!r}")

    def _apply(self, grads, rng):
        return _keep_top(grads, self.keep_fraction, self.scope)


@dataclass(frozen=True)
class GradDrop(UpdateTransform):
    """Zero the ``drop_fraction`` smallest entries by absolute value (Aji & Heafield 2017; RLG paper
    uses 0.5 and 0.9). Global threshold by default (the original drops across the whole update).

    Attributes:
        drop_fraction: the fraction of entries zeroed, in [0, 1].
        scope: ``"global"`` or ``"per_tensor"``.

    Raises:
        InvalidArgument: ``drop_fraction`` outside [0, 1] or an unknown ``scope``.
    """

    drop_fraction: float = 0.9
    scope: str = "global"

    def __post_init__(self) -> None:
        check_probability("drop_fraction", self.drop_fraction)
        if self.scope not in ("global", "per_tensor"):
            raise InvalidArgument(f"scope must be 'global' or 'per_tensor'; got {self.scope!r}")

    def _apply(self, grads, rng):
        return _keep_top(grads, 1.0 - self.drop_fraction, self.scope)


@dataclass(frozen=True)
class SignSGD(UpdateTransform):
    """Send ``scale * sign(g)`` (zeros stay zero).

    Attributes:
        scale: the magnitude of every non-zero entry; > 0.

    Raises:
        InvalidArgument: ``scale`` not > 0.
    """

    scale: float = 1.0

    def __post_init__(self) -> None:
        check_positive("scale", self.scale)

    def _apply(self, grads, rng):
        return {k: torch.sign(v) * self.scale for k, v in grads.items()}


@dataclass(frozen=True)
class GaussianNoise(UpdateTransform):
    """Add i.i.d. N(0, std^2) noise to every entry (no clipping, no accounting: heuristic).

    Attributes:
        std: the noise std, in gradient units; >= 0 (stochastic: needs ``rng``).

    Raises:
        InvalidArgument: ``std`` negative; (call) no ``rng``.
    """

    std: float = 0.01
    stochastic: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_range("std", self.std, 0.0, math.inf)

    def _apply(self, grads, rng):
        g = as_torch(rng)
        out = {}
        for k, v in grads.items():
            noise = torch.randn(v.shape, generator=g, dtype=torch.float32).to(
                device=v.device, dtype=v.dtype
            )
            out[k] = v + self.std * noise
        return out


@dataclass(frozen=True)
class RandomMasking(UpdateTransform):
    """Zero each entry independently with probability ``mask_fraction``; ``rescale`` divides the
    survivors by (1 - mask_fraction) to keep the update unbiased.

    Attributes:
        mask_fraction: the probability that an entry is zeroed, in [0, 1] ([0, 1) with ``rescale``).
        rescale: divide survivors by ``1 - mask_fraction``.

    Raises:
        InvalidArgument: ``mask_fraction`` out of range; (call) no ``rng``.
    """

    mask_fraction: float = 0.5
    rescale: bool = False
    stochastic: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_probability("mask_fraction", self.mask_fraction, open_high=self.rescale)

    def _apply(self, grads, rng):
        g = as_torch(rng)
        out = {}
        for k, v in grads.items():
            keep = (torch.rand(v.shape, generator=g) >= self.mask_fraction).to(v.device)
            w = v * keep.to(v.dtype)
            out[k] = w / (1.0 - self.mask_fraction) if self.rescale else w
        return out


@dataclass(frozen=True)
class ClipUpdate(UpdateTransform):
    """Scale the whole update so that its global L2 norm is at most ``max_norm``.

    Attributes:
        max_norm: the L2 bound of the whole update; > 0.

    Raises:
        InvalidArgument: ``max_norm`` not > 0.
    """

    max_norm: float = 1.0

    def __post_init__(self) -> None:
        check_positive("max_norm", self.max_norm)

    def _apply(self, grads, rng):
        n = global_norm(grads)
        factor = min(1.0, self.max_norm / (n + 1e-12))
        return {k: v * factor for k, v in grads.items()}


class Compose(UpdateTransform):
    """Apply ``transforms`` in order; each stochastic one gets its own child rng.

    Args:
        *transforms: the transforms, applied left to right (nested ``Compose`` objects are flattened);
            ``a >> b`` builds the same.

    Raises:
        InvalidArgument: an element is not an :class:`UpdateTransform`; (call) a stochastic part without ``rng``.
    """

    def __init__(self, *transforms: UpdateTransform) -> None:
        for i, t in enumerate(transforms):
            if not isinstance(t, UpdateTransform):
                raise InvalidArgument(
                    f"transforms[{i}] must be an UpdateTransform; got {type(t).__name__}"
                )
        flat: list[UpdateTransform] = []
        for t in transforms:
            flat.extend(t.transforms if isinstance(t, Compose) else (t,))
        self.transforms = tuple(flat)

    @property
    def stochastic(self) -> bool:  # type: ignore[override]
        return any(t.stochastic for t in self.transforms)

    def _apply(self, grads: dict[str, torch.Tensor], rng: Any) -> dict[str, torch.Tensor]:
        return self(grads, rng=rng)  # Compose applies its parts in __call__

    def __call__(self, grads: Grads, *, rng: Any = None) -> dict[str, torch.Tensor]:
        g = _check_grads(grads)
        if self.stochastic and rng is None:
            raise InvalidArgument("Compose contains a stochastic transform: pass keyword-only rng")
        rngs = (
            spawn(rng, len(self.transforms)) if rng is not None else [None] * len(self.transforms)
        )
        for t, r in zip(self.transforms, rngs):
            g = t(g, rng=r)
        return g

    @property
    def label(self) -> str:
        return " >> ".join(t.label for t in self.transforms)

    def __repr__(self) -> str:
        return f"Compose{self.transforms!r}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Compose) and other.transforms == self.transforms

    def __hash__(self) -> int:
        return hash(self.transforms)


def apply_to_model_grads(
    model: torch.nn.Module, transform: UpdateTransform, *, rng: Any = None
) -> dict[str, torch.Tensor]:
    """Apply ``transform`` to the ``.grad`` of every trainable parameter of ``model`` in place
    (parameters without a gradient are treated as zero and left ``None``); returns the sent dict.

    Args:
        model: the model whose gradients are transformed.
        transform: the transform.
        rng: randomness of a stochastic transform (keyword-only; required for one).

    Returns:
        Parameter name -> the transformed gradient.

    Raises:
        InvalidArgument: a stochastic transform without ``rng``.
    """
    named = {n: p for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}
    sent = transform({n: p.grad.detach() for n, p in named.items()}, rng=rng)
    with torch.no_grad():
        for n, p in named.items():
            p.grad.copy_(sent[n])
    return sent
