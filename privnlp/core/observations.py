"""Typed observations: what an adversary gets to see under a threat model.

Every observation is a frozen dataclass. Tensors inside are not copied; attacks must not
mutate them. Observations never carry the ground truth (that travels separately in a
:class:`~privnlp.core.protocols.Trial`).

Adding a field: append it *with a default* at the end so existing constructors keep working.
"""

from __future__ import annotations

import shutil
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DiskLease",
    "Observation",
    "GradientObservation",
    "ModelSnapshots",
    "BlackBoxLM",
    "PerturbedText",
    "FragmentSet",
    "ReleasedVocabulary",
    "PartyView",
]


class DiskLease:
    """Owns a temporary directory of files behind observations (e.g. per-round snapshots) and
    deletes it when the last observation holding the lease (in ``meta["_lease"]``) is garbage
    collected, so long audits do not fill the disk."""

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.path, True)

    def release(self) -> None:
        """Delete the directory now."""
        self._finalizer()

    def __repr__(self) -> str:
        return f"DiskLease({self.path!r})"


@dataclass(frozen=True)
class Observation:
    """Base class of all observations. ``meta`` holds free-form, JSON-friendly metadata.

    Attributes:
        meta: free-form, JSON-friendly metadata (keyword-only in every subclass).
    """

    meta: Mapping[str, Any] = field(default_factory=dict, kw_only=True)


@dataclass(frozen=True)
class GradientObservation(Observation):
    """A client's update as seen by an eavesdropper / honest-but-curious server.

    Attributes:
        model: the model the gradient was computed on (the attacker has the weights).
        gradients: parameter name -> gradient (or model delta for multi-step updates), on CPU.
        batch_size: number of records behind the update (``None`` if the attacker does not know).
        tokenizer: the victim's tokenizer (public).
        labels: labels of the batch where the threat model grants them (LAMP), else ``None``.
        lengths: sequence lengths where the threat model grants them, else ``None``.
        num_local_steps: 1 for FedSGD; K for a FedAvg-style multi-step update.
        learning_rate: local learning rate for multi-step updates (to rescale deltas).
        transform: name of the update transform / defense applied before sending (if any).
        noise_std: std of Gaussian noise added to the observed update, if known to the attacker.
    """

    model: Any
    gradients: Mapping[str, Any]
    batch_size: int | None = None
    tokenizer: Any = None
    labels: Any = None
    lengths: Sequence[int] | None = None
    num_local_steps: int = 1
    learning_rate: float | None = None
    transform: str | None = None
    noise_std: float | None = None


@dataclass(frozen=True)
class ModelSnapshots(Observation):
    """Global model after every round of federated training, plus the selection log.

    Snapshots live on disk (``paths[r]`` is the state dict after round ``r``) so long runs are
    streamed, not held in memory. ``load(r)`` returns a model with round ``r``'s weights.

    Attributes:
        paths: one file per round (``torch.save`` state dicts), round 0 = initial model.
        selection: ``selection[r]`` = ids of the clients selected in round ``r`` (1-based rounds).
        model_factory: zero-argument callable building the architecture.
        tokenizer: the public tokenizer.
    """

    paths: Sequence[str]
    selection: Sequence[Sequence[Any]]
    model_factory: Callable[[], Any]
    tokenizer: Any = None

    @property
    def num_rounds(self) -> int:
        return len(self.paths) - 1

    def load(self, r: int, *, into: Any = None) -> Any:
        """The model after round ``r``. ``into``: an already built model of the same architecture to
        load the weights into (building a fresh model per round re-runs weight initialisation)."""
        import torch  # deferred: torch: core stays torch-free

        model = self.model_factory() if into is None else into
        state = torch.load(self.paths[r], map_location="cpu", weights_only=True)
        model.load_state_dict(state)
        model.eval()
        return model

    def iter_models(self) -> Any:
        """Yield ``(r, model)`` for every round, reusing one model instance (weights replaced in place)."""
        model = None
        for r in range(len(self.paths)):
            model = self.load(r, into=model)
            yield r, model


@dataclass(frozen=True)
class BlackBoxLM(Observation):
    """Query access to a (causal or masked) language model.

    Attributes:
        model: the trained model (attacks use it through log-prob queries only).
        tokenizer: its tokenizer.
        kind: ``"causal"`` or ``"masked"``.
        vocabulary: optional list of words the attacker may enumerate (canary randomness space).
    """

    model: Any
    tokenizer: Any
    kind: str = "causal"
    vocabulary: Sequence[str] | None = None


@dataclass(frozen=True)
class PerturbedText(Observation):
    """Texts (or words) released by a sanitizer, with the mechanism's public parameters.

    Attributes:
        texts: the released texts / words, in input order.
        mechanism: the mechanism instance (public: the adversary knows the algorithm and its
            parameters, Kerckhoffs), or ``None``.
        vocabulary: the public vocabulary / embedding index the mechanism used.
    """

    texts: Sequence[str]
    mechanism: Any = None
    vocabulary: Any = None


@dataclass(frozen=True)
class FragmentSet(Observation):
    """Released phrase-pair fragments (shuffled), source and target sides aligned by index.

    Attributes:
        source: the released source-side fragments.
        target: the aligned target-side fragments (``target[i]`` pairs with ``source[i]``).
        tagged: whether fragments carry position tags (see ``strip_tags``).
        settings: the fragmentation settings (maximum length, discard fraction, ...).
    """

    source: Sequence[str]
    target: Sequence[str]
    tagged: bool = False
    settings: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReleasedVocabulary(Observation):
    """A released vocabulary (e.g. the WordPiece vocab of a DP tokenizer).

    Attributes:
        tokens: the released vocabulary (token strings).
        tokenizer: the released tokenizer, where there is one.
        histogram: the released (noisy) word histogram, where it is released too.
    """

    tokens: Sequence[str]
    tokenizer: Any = None
    histogram: Mapping[str, float] | None = None


@dataclass(frozen=True)
class PartyView(Observation):
    """Everything one MPC party received during a protocol run.

    Attributes:
        party: the party's role (``"alice"``, ``"bob"``, ``"ttp"``).
        received: label -> the values (ring elements as int64 tensors / arrays) the party received.
        opened: label -> values that were revealed in the clear to this party.
        ring_bits: size of the ring (64 for CrypTen).
    """

    party: str
    received: Mapping[str, Any]
    opened: Mapping[str, Any] = field(default_factory=dict)
    ring_bits: int = 64
