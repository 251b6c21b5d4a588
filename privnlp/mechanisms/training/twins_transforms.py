"""Leaky twins of the update-transform defenses and of frozen embeddings (see privnlp/mechanisms/testing.py).

Each twin subclasses its mechanism, keeps the constructor and the claim, and contains one realistic
implementation bug that breaks the protection. They are audited on the ``fedsgd.eavesdropper``
scenario (``privnlp evaluate --defense NAME``) and caught by the paired attack named in their
docstring: RLG (``../shared/papers/rlg-revealing-labels-from-gradients.txt``) on the multi-class
``labels`` trials, FILM (``../shared/papers/film-recovering-private-text-in-fl.txt``) on the LM
trials, LAMP (``../shared/papers/lamp-extracting-text-from-gradients.txt``) on the classifier trial.
``tests/gradient/test_twins_transforms.py`` checks both the bug's behaviour and that it is caught.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from privnlp.core.registry import LEAKY_TWINS
from privnlp.core.rng import as_torch

from .embedding import input_embedding, position_embedding_modules
from .mechanisms import (
    FrozenEmbeddings,
    GaussianNoiseUpdate,
    GradDropDefense,
    GradientPruningDefense,
    RandomMaskingDefense,
    SignSGDDefense,
)
from .transforms import GaussianNoise, GradDrop, GradientPruning, RandomMasking, SignSGD, _keep_top

__all__ = [
    "LeakyFrozenEmbeddingsDataFlag",
    "LeakyGradientPruningInvertedRatio",
    "LeakySignSGDScaleShortcut",
    "LeakyGradDropDenseSmallTensors",
    "LeakyGaussianNoiseDiscarded",
    "LeakyRandomMaskingDiscarded",
]


class _Disguised:
    """Mixin: the buggy transform reports the label of the transform it imitates (same claim, same logs)."""

    @property
    def label(self) -> str:
        base = next(c for c in type(self).__mro__[1:] if not c.__name__.startswith("_"))
        args = ",".join(f"{k}={v}" for k, v in vars(self).items())
        return f"{base.__name__}({args})"


# ---------------------------------------------------------------------------- frozen embeddings
@LEAKY_TWINS.register("frozen_embeddings")
class LeakyFrozenEmbeddingsDataFlag(FrozenEmbeddings):
    """Bug: "freezes" through ``p.data.requires_grad_(False)``. ``p.data`` is a new detached tensor
    sharing the storage, so the flag is set on a throw-away alias and the parameter itself still
    requires grad: the word-embedding (and tied ``lm_head``) gradient rows are computed and sent, while
    :meth:`apply` reports them as frozen. Caught by FILM (bag of words from the non-zero rows:
    rougeL back to the undefended level instead of ~0)."""

    def apply(self, model: Any) -> tuple[str, ...]:
        mods = []
        if self.word:
            mods.append(input_embedding(model)[1])
        if self.position:
            mods += [m for _, m in position_embedding_modules(model)]
        targets = {id(p) for m in mods for p in m.parameters()}
        frozen = []
        for name, p in model.named_parameters(remove_duplicate=False):
            if id(p) in targets:
                p.data.requires_grad_(False)  # the bug: the alias is frozen, not the parameter
                frozen.append(name)
        return tuple(frozen)


# ---------------------------------------------------------------------------- gradient pruning
@dataclass(frozen=True)
class _InvertedPruning(_Disguised, GradientPruning):
    """``keep_fraction`` handed to code written for the prune ratio ``p`` (Zhu et al. / FILM's knob)."""

    def _apply(self, grads, rng):
        return _keep_top(
            grads, 1.0 - self.keep_fraction, self.scope
        )  # the bug: keeps 1 - keep_fraction


@LEAKY_TWINS.register("gradient_pruning")
class LeakyGradientPruningInvertedRatio(GradientPruningDefense):
    """Bug: ``keep_fraction`` is passed where the helper expects the *prune ratio* (FILM and Zhu et
    al. parametrise pruning by ``p = 1 - keep``), so ``keep_fraction=0.01`` keeps 99% of every tensor
    instead of 1%; the label rows of the output layer survive intact. Caught by RLG on the ``labels``
    trials (f1 back to ~1 instead of the defended ~0.2)."""

    def transform(self) -> Any:
        return _InvertedPruning(self.keep_fraction, self.scope)


# ---------------------------------------------------------------------------- sign-SGD
@dataclass(frozen=True)
class _SignShortcut(_Disguised, SignSGD):
    """``scale * sign(g)``, with a "fast path" for the default scale."""

    def _apply(self, grads, rng):
        if self.scale == 1.0:  # the bug: "multiplying by 1 is a no-op" skipped the sign as well
            return {k: v.clone() for k, v in grads.items()}
        return {k: torch.sign(v) * self.scale for k, v in grads.items()}


@LEAKY_TWINS.register("sign_sgd")
class LeakySignSGDScaleShortcut(SignSGDDefense):
    """Bug: a shortcut for ``scale == 1`` returns the gradient unchanged (meant to skip the multiply,
    it skips ``sign`` too), so with the default scale the raw gradient is sent. Caught by RLG (exact
    label sets, f1 ~1 instead of 0 under real Sign-SGD) and FILM."""

    def transform(self) -> Any:
        return _SignShortcut(self.scale)


# ---------------------------------------------------------------------------- GradDrop
@dataclass(frozen=True)
class _GradDropDenseSmall(_Disguised, GradDrop):
    """GradDrop that sends tensors under ``min_numel`` entries dense (as some compressors do)."""

    min_numel: ClassVar[int] = 10_000

    def _apply(self, grads, rng):
        big = {k: v for k, v in grads.items() if v.numel() >= self.min_numel}
        dropped = _keep_top(big, 1.0 - self.drop_fraction, self.scope) if big else {}
        # the bug: "small tensors are not worth compressing" -- the projection layer and biases are small
        return {k: dropped[k] if k in dropped else v.clone() for k, v in grads.items()}


@LEAKY_TWINS.register("graddrop")
class LeakyGradDropDenseSmallTensors(GradDropDefense):
    """Bug: tensors with fewer than 10,000 entries are sent dense because "compressing them saves
    nothing" (a common communication-compression shortcut). The output layer of a classifier (and
    every bias) is small, so exactly the update RLG reads is transmitted unmodified. Caught by RLG on
    the ``labels`` trials (f1 ~1 instead of the defended value)."""

    def transform(self) -> Any:
        return _GradDropDenseSmall(self.drop_fraction, self.scope)


# ---------------------------------------------------------------------------- Gaussian noise
@dataclass(frozen=True)
class _NoiseDiscarded(_Disguised, GaussianNoise):
    def _apply(self, grads, rng):
        g = as_torch(rng)
        out = {}
        for k, v in grads.items():
            noise = torch.randn(v.shape, generator=g, dtype=torch.float32).to(
                device=v.device, dtype=v.dtype
            )
            w = v.clone()
            w.add(self.std * noise)  # the bug: out-of-place add, result discarded (meant add_)
            out[k] = w
        return out


@LEAKY_TWINS.register("gaussian_noise_update")
class LeakyGaussianNoiseDiscarded(GaussianNoiseUpdate):
    """Bug: the noise is drawn (same RNG consumption, same label/std in the logs) but added with the
    out-of-place ``w.add(noise)`` instead of ``w.add_(noise)``; the result is discarded and the clean
    gradient is sent. Caught by LAMP and FILM (text recovered as if undefended; the defended update
    gives ~0) and by RLG."""

    def transform(self) -> Any:
        return _NoiseDiscarded(self.std)


# ---------------------------------------------------------------------------- random masking
@dataclass(frozen=True)
class _MaskWrongDict(_Disguised, RandomMasking):
    def _apply(self, grads, rng):
        g = as_torch(rng)
        masked, out = {}, {}
        for k, v in grads.items():
            keep = (torch.rand(v.shape, generator=g) >= self.mask_fraction).to(v.device)
            w = v * keep.to(v.dtype)
            masked[k] = w / (1.0 - self.mask_fraction) if self.rescale else w
            out[k] = v.clone() / (1.0 - self.mask_fraction) if self.rescale else v.clone()
        return out  # the bug: the masked dict is built, the unmasked copy is returned


@LEAKY_TWINS.register("random_masking")
class LeakyRandomMaskingDiscarded(RandomMaskingDefense):
    """Bug: the mask is drawn and applied into one dict, but the function returns the other one (the
    unmasked copy it made first), so the full gradient is sent. Caught by LAMP (rouge2 back to the
    undefended level) and by RLG on the ``labels`` trials."""

    def transform(self) -> Any:
        return _MaskWrongDict(self.mask_fraction, self.rescale)
