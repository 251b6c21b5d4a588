"""Mechanism / Attack protocols, attack results and evaluation scenarios.

Conventions (DESIGN.md):

* ``__init__`` stores hyperparameters only (each argument is an attribute of the same name);
  validation may happen there, computation may not.
* the operation (``privatize``, ``sanitize``, ``train``, ``run``...) takes keyword-only ``rng``.
* results are frozen dataclasses.

Metric convention: an attack declares ``headline_metric``, a key of its ``score()`` output
for which **higher means more leakage** (ROUGE-L of a reconstruction, exposure, F1 of
recovered labels, ...). Reports and leaky-twin tests rely on it.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from .claims import PrivacyClaim, ThreatModel
from .errors import InvalidArgument
from .observations import Observation

__all__ = [
    "Mechanism",
    "Attack",
    "AttackResult",
    "Trial",
    "ScenarioRun",
    "Scenario",
    "AttackProtocol",
    "PrivateTrainer",
    "UpdateTransformer",
    "EmbeddingFreezer",
    "ModelDefense",
    "TrainingLossTerm",
    "Aggregator",
    "WordSanitizer",
    "TextSanitizer",
    "VocabularyReleaser",
    "Fragmenter",
    "SecureInference",
    "Redactor",
    "MECHANISM_FAMILIES",
]


@dataclass(frozen=True)
class AttackResult:
    """What an attack produced: its reconstructions / guesses and raw scores.

    ``score(ground_truth)`` turns it into metrics (``dict[str, float]``) with the attack's
    scorer. ``raw`` holds attack-internal numbers (ranks, losses, thresholds, ...).

    Attributes:
        attack: the attack's registry name.
        reconstructions: the attack's reconstructions / guesses, in trial order.
        raw: attack-internal numbers (ranks, losses, thresholds, ...).
        scorer: ``(result, ground_truth) -> metrics``; without one, ``score`` raises ``InvalidArgument``.
    """

    attack: str
    reconstructions: tuple[Any, ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)
    scorer: Callable[[AttackResult, Any], Mapping[str, float]] | None = field(
        default=None, repr=False, compare=False
    )

    def score(self, ground_truth: Any) -> dict[str, float]:
        if self.scorer is None:
            raise InvalidArgument(
                f"attack {self.attack!r} produced a result without a scorer: build its "
                "AttackResult with scorer=... (a function (result, ground_truth) -> metrics)"
            )
        return {k: float(v) for k, v in self.scorer(self, ground_truth).items()}


class Mechanism(abc.ABC):
    """Base class of every defense.

    Class attributes a subclass sets:
        name: registry name (set by the decorator too).
        paper: the paper(s) it implements (file in ``shared/papers`` and citation).
        paired_attacks: names of the attacks that evaluate it.
        threat_models: the threat models its claim is about.
        scenario: name of the default evaluation scenario (``privnlp.evaluation.scenarios``).
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    paired_attacks: ClassVar[tuple[str, ...]] = ()
    threat_models: ClassVar[tuple[ThreatModel, ...]] = ()
    scenario: ClassVar[str | None] = None

    @abc.abstractmethod
    def claim(self) -> PrivacyClaim:
        """The privacy claim of this configured mechanism."""

    @classmethod
    def example(cls, preset: str = "quick") -> Mechanism:
        """A sensibly configured instance used by ``privnlp evaluate`` (``quick``/``full``)."""
        return cls()  # type: ignore[call-arg]

    def params(self) -> dict[str, Any]:
        """Hyperparameters (the constructor's arguments), JSON-friendly."""
        out = {}
        for k, v in vars(self).items():
            if k.startswith("_"):
                continue
            out[k] = (
                v
                if isinstance(v, (int, float, str, bool, type(None), list, tuple, dict))
                else repr(v)
            )
        return out

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


class Attack(abc.ABC):
    """Base class of every evaluator (attack).

    Class attributes a subclass sets: ``name``, ``paper``, ``observation_type``,
    ``threat_model``, ``headline_metric`` (higher = more leakage), and ``unmeasured_presets``:
    preset -> why the attack's headline is not a measurement at that size (an audit that runs the paired
    attacks skips it there and says so on the card; asking for the attack by name still runs it).
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    observation_type: ClassVar[type[Observation]] = Observation
    threat_model: ClassVar[ThreatModel | None] = None
    headline_metric: ClassVar[str] = ""
    unmeasured_presets: ClassVar[Mapping[str, str]] = {}

    @abc.abstractmethod
    def run(self, observation: Observation, *, rng: Any) -> AttackResult:
        """Run the attack on one observation."""

    def applies_to(self, observation: Observation) -> bool:
        return isinstance(observation, self.observation_type)

    @classmethod
    def example(cls, preset: str = "quick") -> Attack:
        return cls()  # type: ignore[call-arg]

    def params(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


@runtime_checkable
class AttackProtocol(Protocol):
    """Structural protocol for user-supplied attacks: an ``observation_type`` and ``run(observation, *, rng)``
    returning an :class:`AttackResult`.
    """

    observation_type: type

    def run(self, observation: Observation, *, rng: Any) -> AttackResult: ...


# ---------------------------------------------------------------------------- mechanism families
# One interface per family: what a scenario calls on a mechanism. They are structural (runtime-checkable
# Protocols), so ``isinstance(mech, UpdateTransformer)`` holds for every class with the method, ours or a
# user's, without inheriting from anything; scenarios dispatch on them instead of probing with
# ``hasattr`` or comparing class names. ``isinstance`` on a Protocol checks that the members exist, not
# their signatures: where two families share a method name (``apply``), a scenario tests the more
# specific family first (:class:`EmbeddingFreezer` declares its ``word`` / ``position`` fields).


@runtime_checkable
class PrivateTrainer(Protocol):
    """A training-time DP mechanism (DP-SGD): wraps a model, optimizer and data loader and returns a handle
    (``.model``, ``.optimizer``, ``.data_loader``, ``.loss(per_sample)``, ``.epsilon()``, ``.claim()``)."""

    noise_multiplier: float | None
    max_grad_norm: float

    def make_private(
        self, model: Any, optimizer: Any, data_loader: Any, *, rng: Any = None
    ) -> Any: ...


@runtime_checkable
class UpdateTransformer(Protocol):
    """A defense on a client's gradient / model update (pruning, sign, GradDrop, noise, masking):
    ``transform()`` returns a callable ``(grads: dict[str, Tensor], *, rng) -> dict[str, Tensor]``."""

    def transform(self) -> Callable[..., Mapping[str, Any]]: ...


@runtime_checkable
class EmbeddingFreezer(Protocol):
    """Freezes embedding rows before training: ``apply(model)`` returns the frozen parameter names."""

    word: bool
    position: bool

    def apply(self, model: Any) -> tuple[str, ...]: ...


@runtime_checkable
class ModelDefense(Protocol):
    """Changes a local model before it trains (noised / dropout embeddings, LSTM dropout):
    ``apply(model, *, rng)``."""

    def apply(self, model: Any, *, rng: Any) -> Any: ...


@runtime_checkable
class TrainingLossTerm(Protocol):
    """Adds a term to the local training loss (adversarial embedding / VAT):
    ``loss_terms(model, inputs, *, rng, forward=None)``."""

    def loss_terms(self, model: Any, inputs: Any, *, rng: Any, forward: Any = None) -> Any: ...


@runtime_checkable
class Aggregator(Protocol):
    """Server-side federated aggregation (FedAvg, DP-FedAvg): the population check, the per-round client
    configuration and the aggregate of the replies."""

    def check_population(self, num_users: int) -> None: ...

    def client_config(self, server_round: int, seed: int) -> dict[str, Any]: ...

    def aggregate(
        self, reference: Any, replies: Any, *, num_selected: int, plan: Any, generator: Any
    ) -> Any: ...


@runtime_checkable
class WordSanitizer(Protocol):
    """Word-level text perturbation (metric DP): ``perturb_words(words, *, rng)`` -> released words."""

    def perturb_words(self, words: Any, *, rng: Any = None) -> list[str]: ...


@runtime_checkable
class TextSanitizer(Protocol):
    """Sanitizes one text: ``sanitize(text, *, rng)`` -> a sanitized-text result."""

    def sanitize(self, text: str, *, rng: Any = None) -> Any: ...


@runtime_checkable
class VocabularyReleaser(Protocol):
    """Builds and releases a vocabulary from private documents (DP WordPiece): ``build(...)``."""

    def build(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class Fragmenter(Protocol):
    """Releases a parallel corpus as phrase fragments: ``fragment(...)``."""

    def fragment(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class SecureInference(Protocol):
    """Runs inference under MPC: ``classify(...)``."""

    def classify(self, *args: Any, **kwargs: Any) -> Any: ...


@runtime_checkable
class Redactor(Protocol):
    """Redacts personal data from records after fitting on them (PII redaction): ``fit(...)``."""

    def fit(self, *args: Any, **kwargs: Any) -> Any: ...


#: every mechanism family, most specific first (the order a scenario tests them in)
MECHANISM_FAMILIES: tuple[type, ...] = (
    PrivateTrainer,
    Aggregator,
    UpdateTransformer,
    EmbeddingFreezer,
    TrainingLossTerm,
    ModelDefense,
    WordSanitizer,
    TextSanitizer,
    VocabularyReleaser,
    Fragmenter,
    SecureInference,
    Redactor,
)


@dataclass(frozen=True)
class Trial:
    """One observation with the ground truth that scores attacks on it (never shown to them).

    Attributes:
        observation: what the adversary sees.
        ground_truth: what the attacks are scored against (its type depends on the scenario).
    """

    observation: Observation
    ground_truth: Any


@dataclass(frozen=True)
class ScenarioRun:
    """The outcome of running a scenario once (one seed): trials + utility of the defended system.

    Attributes:
        trials: one trial per observation the adversary gets.
        utility: utility metrics of the defended system (name -> value).
        config: the scenario's settings, recorded in the report.
    """

    trials: tuple[Trial, ...]
    utility: Mapping[str, float] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)


class Scenario(abc.ABC):
    """Turns (mechanism or None for the undefended baseline, seed) into observations.

    A scenario encodes a threat model: it runs the private pipeline (training, sanitizing,
    releasing...) with the mechanism in place and hands out what the adversary observes.

    Args:
        preset: ``"quick"`` (CI-sized) or ``"full"`` (the card's setting); stored as ``preset``.
    """

    name: ClassVar[str] = ""
    threat_model: ClassVar[ThreatModel | None] = None
    #: utility metrics where higher is better (others are treated as costs)
    utility_higher_is_better: ClassVar[Mapping[str, bool]] = {}

    def __init__(self, preset: str = "quick") -> None:
        self.preset = preset

    @abc.abstractmethod
    def run(self, mechanism: Any | None, *, rng: Any) -> ScenarioRun:
        """Run once with ``mechanism`` (``None`` = undefended) and return the trials."""
