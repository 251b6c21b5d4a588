"""Results of a DP audit: one :class:`DPAuditResult` per audited configuration and system (the defense or
its leaky twin), gathered in a :class:`DPAuditSuite` per registered defense."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from privnlp.core.claims import _jsonable

__all__ = [
    "DPAuditResult",
    "DPAuditSuite",
    "SYSTEMS",
    "qualname",
    "EpsilonBound",
    "DEFAULT_CONFIDENCE",
]

#: the default confidence of every audit bound
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class EpsilonBound:
    """A lower bound on epsilon from one audit.

    Attributes:
        epsilon: the lower bound (``>= 0``; ``inf`` only if the mechanism was seen to be non-private).
        method: ``clopper_pearson`` (Jagielski et al.), ``gdp_clopper_pearson`` (Gaussian trade-off),
            ``steinke_one_run``, ``fdp_gaussian_one_run`` (Mahloujifar et al.) or ``metric_clopper_pearson``.
        delta: the delta at which the bound is stated.
        confidence: the probability (over the audit's randomness) that the bound is valid.
        trials: runs (repeated-runs methods), canaries (one-run methods) or mechanism calls (metric DP).
        mu: the GDP lower bound where the method gives one.
        details: counts, threshold, etc.
    """

    epsilon: float
    method: str
    delta: float
    confidence: float
    trials: int
    mu: float | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(
            {
                "epsilon": self.epsilon,
                "method": self.method,
                "delta": self.delta,
                "confidence": self.confidence,
                "trials": self.trials,
                "mu": self.mu,
                "details": dict(self.details),
            }
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EpsilonBound:
        f = lambda x: None if x is None else float(x)  # noqa: E731  ("inf" strings parse too)
        return cls(
            float(d["epsilon"]),
            d["method"],
            float(d["delta"]),
            float(d["confidence"]),
            int(d["trials"]),
            f(d.get("mu")),
            dict(d.get("details", {})),
        )


def qualname(cls: Any) -> str:
    """``module.QualName`` of the audited implementation (recorded in every result)."""
    return f"{cls.__module__}.{cls.__qualname__}"


SYSTEMS = ("defense", "leaky_twin")


@dataclass(frozen=True)
class DPAuditResult:
    """One audit of one system at one configuration.

    Attributes:
        mechanism: the registered defense name (also for its twin).
        system: ``"defense"`` or ``"leaky_twin"``.
        implementation: the audited class (``module.QualName``).
        variant: what the adversary does (e.g. ``"white-box Dirac canary, one step, repeated runs"``).
        claimed_epsilon, claimed_delta, unit: the claim of the *audited configuration*, as the mechanism
            states it (its own accountant); for metric DP epsilon is per unit of the metric.
        audited: the headline lower bound (its method, confidence and number of trials inside).
        others: further bounds computed on the same runs (other analyses).
        config: the audited configuration (mechanism parameters, trials, canary design).
        seconds: wall time of the audit; ``calls``: mechanism invocations (steps / rounds / builds / words).
    """

    mechanism: str
    system: str
    implementation: str
    variant: str
    claimed_epsilon: float
    claimed_delta: float
    unit: str
    audited: EpsilonBound
    others: tuple[EpsilonBound, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    calls: int = 0
    seed: int = 0
    notes: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        """audited / claimed (``nan`` for a claim of 0 or inf)."""
        c = self.claimed_epsilon
        if c <= 0 or math.isinf(c):
            return math.nan
        return self.audited.epsilon / c

    @property
    def violated(self) -> bool:
        """The audit proves (at its confidence) that the claim is false: audited > claimed."""
        return self.audited.epsilon > self.claimed_epsilon

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(
            {
                "mechanism": self.mechanism,
                "system": self.system,
                "implementation": self.implementation,
                "variant": self.variant,
                "claimed_epsilon": self.claimed_epsilon,
                "claimed_delta": self.claimed_delta,
                "unit": self.unit,
                "audited": self.audited.to_dict(),
                "others": [b.to_dict() for b in self.others],
                "config": dict(self.config),
                "seconds": self.seconds,
                "calls": self.calls,
                "seed": self.seed,
                "notes": list(self.notes),
                "ratio": self.ratio,
                "violated": self.violated,
            }
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DPAuditResult:
        return cls(
            d["mechanism"],
            d["system"],
            d["implementation"],
            d["variant"],
            float(d["claimed_epsilon"]),
            float(d["claimed_delta"]),
            d["unit"],
            EpsilonBound.from_dict(d["audited"]),
            tuple(EpsilonBound.from_dict(b) for b in d.get("others", ())),
            dict(d.get("config", {})),
            float(d.get("seconds", 0.0)),
            int(d.get("calls", 0)),
            int(d.get("seed", 0)),
            tuple(d.get("notes", ())),
        )


@dataclass(frozen=True)
class DPAuditSuite:
    """Every audit of one registered defense (and of its leaky twin) for one preset and seed.

    Attributes:
        mechanism: the audited defense's registry name.
        preset: ``"quick"`` or ``"full"``.
        seed: the audit's seed.
        results: every audit result, the defense's first (``system="defense"``), then its leaky twin's.
        seconds: total wall-clock seconds of the audits.
    """

    mechanism: str
    preset: str
    seed: int
    results: tuple[DPAuditResult, ...]
    seconds: float = 0.0

    def of(self, system: str) -> tuple[DPAuditResult, ...]:
        return tuple(r for r in self.results if r.system == system)

    @property
    def headline(self) -> DPAuditResult | None:
        """The first (primary) audit of the defense."""
        d = self.of("defense")
        return d[0] if d else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "preset": self.preset,
            "seed": int(self.seed),
            "seconds": float(self.seconds),
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DPAuditSuite:
        return cls(
            d["mechanism"],
            d["preset"],
            int(d["seed"]),
            tuple(DPAuditResult.from_dict(r) for r in d.get("results", ())),
            float(d.get("seconds", 0.0)),
        )
