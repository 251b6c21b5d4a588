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
    "MechanismProtocol",
    "AttackProtocol",
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
    ``threat_model``, ``headline_metric`` (higher = more leakage).
    """

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    observation_type: ClassVar[type[Observation]] = Observation
    threat_model: ClassVar[ThreatModel | None] = None
    headline_metric: ClassVar[str] = ""

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
class MechanismProtocol(Protocol):
    """Structural protocol for user-supplied mechanisms (bring your own)."""

    def claim(self) -> PrivacyClaim: ...


@runtime_checkable
class AttackProtocol(Protocol):
    """Structural protocol for user-supplied attacks: an ``observation_type`` and ``run(observation, *, rng)``
    returning an :class:`AttackResult`.
    """

    observation_type: type

    def run(self, observation: Observation, *, rng: Any) -> AttackResult: ...


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
