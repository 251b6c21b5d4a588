"""Core contracts used by every part of privnlp (claims, threat models, observations,
mechanism/attack protocols, results, reports, registries, errors, rng helpers).

Importing this package does not import torch.
"""

from . import rng
from .claims import Adversary, ClaimKind, PrivacyClaim, PrivacyUnit, ThreatModel
from .errors import (
    InvalidArgument,
    InvalidPrivacyParameter,
    MalformedInput,
    MissingDependency,
    PrivacyBudgetExceeded,
    PrivnlpError,
    ProtocolError,
    check_positive,
    check_probability,
    check_range,
)
from .observations import (
    BlackBoxLM,
    FragmentSet,
    GradientObservation,
    ModelSnapshots,
    Observation,
    PartyView,
    PerturbedText,
    ReleasedVocabulary,
)
from .protocols import (
    Attack,
    AttackProtocol,
    AttackResult,
    Mechanism,
    Scenario,
    ScenarioRun,
    Trial,
)
from .registry import ATTACKS, LEAKY_TWINS, MECHANISMS, SCENARIOS, Registry
from .report import (
    AttackMetrics,
    Figure,
    LeakageReport,
    MetricSummary,
    atomic_write_text,
    figure_from_matplotlib,
    package_versions,
    summarize,
)

__all__ = [
    "PrivacyClaim",
    "ClaimKind",
    "PrivacyUnit",
    "ThreatModel",
    "Adversary",
    "Observation",
    "GradientObservation",
    "ModelSnapshots",
    "BlackBoxLM",
    "PerturbedText",
    "FragmentSet",
    "ReleasedVocabulary",
    "PartyView",
    "Mechanism",
    "Attack",
    "AttackProtocol",
    "AttackResult",
    "Scenario",
    "ScenarioRun",
    "Trial",
    "Registry",
    "MECHANISMS",
    "ATTACKS",
    "SCENARIOS",
    "LEAKY_TWINS",
    "LeakageReport",
    "AttackMetrics",
    "MetricSummary",
    "summarize",
    "Figure",
    "figure_from_matplotlib",
    "atomic_write_text",
    "package_versions",
    "PrivnlpError",
    "InvalidArgument",
    "InvalidPrivacyParameter",
    "PrivacyBudgetExceeded",
    "MalformedInput",
    "MissingDependency",
    "ProtocolError",
    "check_range",
    "check_positive",
    "check_probability",
    "rng",
]
