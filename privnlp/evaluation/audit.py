"""The audit runner: a defense against its paired attacks, on the same data, over seeds.

``audit(mechanism, scenario, attacks=None, *, seeds)`` runs the scenario once per seed with
the mechanism in place (the *defended* system) and once without it (the *undefended*
baseline, same seed, same data), runs every paired attack whose observation type the
scenario produces, scores each attack against the ground truth the scenario kept aside,
and returns a :class:`~privnlp.core.report.LeakageReport` with 95% confidence intervals
over seeds. Results are cached per (mechanism, scenario, attack, seed) so an interrupted
run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from privnlp.core.claims import PrivacyClaim, ThreatModel, _jsonable
from privnlp.core.errors import InvalidArgument
from privnlp.core.numerics import (
    environment,
    numerics_fingerprint,
    pinned_threads,
    source_fingerprint,
)
from privnlp.core.protocols import Attack, Mechanism, Scenario, ScenarioRun
from privnlp.core.registry import ATTACKS, LEAKY_TWINS, MECHANISMS, SCENARIOS
from privnlp.core.report import (
    AttackMetrics,
    LeakageReport,
    MetricSummary,
    atomic_write_text,
    package_versions,
    summarize,
)
from privnlp.evaluation.plots import headline_bar_figure
from privnlp.evaluation.realistic import attack_for, base_preset, scenario_preset

__all__ = [
    "audit",
    "resolve_mechanism",
    "resolve_scenario",
    "resolve_attacks",
    "FunctionMechanism",
    "SeedOutcome",
]


class FunctionMechanism(Mechanism):
    """Wrap a user's callable as a mechanism ("bring your own defense").

    The scenario decides how a mechanism is applied: each scenario documents the method it calls
    (``text.perturbation``: ``perturb_words``; ``fedsgd.eavesdropper``: ``transform``; ...). Name that
    method in ``operation``: ``FunctionMechanism`` then answers it with ``fn`` and has no other method,
    so a scenario that needs something else fails with a message that says what is missing (it does
    not receive ``fn`` for every name it asks about). The claim is whatever the user states: privnlp
    measures, it does not certify.

    Args:
        fn: the user's callable.
        claim: the privacy claim the user states (stored as ``claim_``; returned by ``claim()``).
        operation: the method name(s) ``fn`` implements (a Python identifier not starting with ``_``,
            not one of the mechanism's own attributes such as ``claim`` or ``params``); ``()`` = only
            calling the object itself.
        name: the name shown in the report.
        paired_attacks: registry names of the attacks to run against it.
        scenario: the registry name of the scenario to run it in (``None`` = pass one to :func:`audit`).
        threat_models: the threat models the claim is about.

    Raises:
        InvalidArgument: ``fn`` is not callable, or an ``operation`` is not a usable method name.
    """

    name = "user_function"
    _RESERVED = frozenset(
        {"claim", "claim_", "fn", "operation", "params", "example", "name", "paired_attacks"}
        | {"scenario", "threat_models", "paper"}
    )

    def __init__(
        self,
        fn: Any,
        *,
        claim: PrivacyClaim,
        operation: str | Sequence[str] = (),
        name: str = "user_function",
        paired_attacks: Sequence[str] = (),
        scenario: str | None = None,
        threat_models: Sequence[ThreatModel] = (),
    ) -> None:
        if not callable(fn):
            raise InvalidArgument(f"fn must be callable; got {type(fn).__name__}")
        ops = (operation,) if isinstance(operation, str) else tuple(operation)
        for op in ops:
            if not (isinstance(op, str) and op.isidentifier()) or op.startswith("_"):
                raise InvalidArgument(
                    f"operation must be method names (identifiers not starting with '_'); got {op!r}"
                )
            if op in self._RESERVED:
                raise InvalidArgument(
                    f"operation {op!r} is one of the mechanism's own attributes "
                    f"({', '.join(sorted(self._RESERVED))}); name the method the scenario calls"
                )
        self.fn = fn
        self.claim_ = claim
        self.operation = ops
        self.name = name  # type: ignore[misc]
        self.paired_attacks = tuple(paired_attacks)  # type: ignore[misc]
        self.scenario = scenario  # type: ignore[misc]
        self.threat_models = tuple(threat_models)  # type: ignore[misc]

    def claim(self) -> PrivacyClaim:
        return self.claim_

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __getattr__(self, item: str) -> Any:
        # only reached for names that are not attributes: the declared operations answer with fn
        ops = self.__dict__.get("operation", ())
        if item in ops:
            return self.fn
        raise AttributeError(
            f"FunctionMechanism {self.__dict__.get('name', '?')!r} has no {item!r}: it implements "
            f"{ops or 'no method (only calling it)'}; pass operation={item!r} if fn is that method"
        )

    def params(self) -> dict[str, Any]:
        return {
            "fn": getattr(self.fn, "__qualname__", repr(self.fn)),
            "name": self.name,
            "operation": list(self.operation),
        }


def resolve_mechanism(mechanism: Any, preset: str = "quick") -> Mechanism:
    if isinstance(mechanism, str):
        # issue #17: mechanisms have quick/full examples; realistic uses quick's
        return MECHANISMS.get(mechanism).example(base_preset(preset))
    if isinstance(mechanism, type) and issubclass(mechanism, Mechanism):
        return mechanism.example(base_preset(preset))
    if not hasattr(mechanism, "claim"):
        raise InvalidArgument(
            "mechanism must be a registered name, a Mechanism, or an object with claim(); "
            f"got {type(mechanism).__name__} (wrap a callable with FunctionMechanism)"
        )
    return mechanism


def resolve_scenario(scenario: Any, mechanism: Any, preset: str = "quick") -> Scenario:
    if scenario is None:
        scenario = getattr(mechanism, "scenario", None)
        if scenario is None:
            raise InvalidArgument(
                f"scenario is required: mechanism {getattr(mechanism, 'name', mechanism)!r} "
                f"names no default scenario; known scenarios: {SCENARIOS.names()}"
            )

    if isinstance(scenario, str):
        return SCENARIOS.get(scenario)(preset=scenario_preset(scenario, preset))
    if isinstance(scenario, type) and issubclass(scenario, Scenario):
        return scenario(preset=scenario_preset(getattr(scenario, "name", None), preset))
    if not hasattr(scenario, "run"):
        raise InvalidArgument(
            f"scenario must be a registered name or a Scenario; got {type(scenario).__name__}"
        )
    return scenario


def resolve_attacks(attacks: Any, mechanism: Any, preset: str = "quick") -> list[Attack]:
    if attacks is None:
        attacks = [a for a in getattr(mechanism, "paired_attacks", ()) if a in ATTACKS.load_all()]
    out = []

    for a in attacks:
        if isinstance(a, str):
            out.append(attack_for(a, ATTACKS.get(a), preset))
        elif isinstance(a, type):
            out.append(attack_for(getattr(a, "name", ""), a, preset))
        else:
            out.append(a)
    return out


@dataclass(frozen=True)
class SeedOutcome:
    """Metrics of every attack on one seed (one value per trial) + utility."""

    seed: int
    attack_metrics: Mapping[str, Mapping[str, float]]
    utility: Mapping[str, float]


def _key(*parts: Any) -> str:
    blob = json.dumps(
        _jsonable(
            [repr(p) if not isinstance(p, (str, int, float, dict, list)) else p for p in parts]
        ),
        sort_keys=True,
        default=repr,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


_CODE_IDS: dict = {}


def _code_id(obj: Any) -> str:
    """Fingerprint of the source files defining ``obj``'s class and its bases (privnlp's and the user's
    code, not third-party packages), so that a
    cached result is recomputed when the code that produced it changes, not only its parameters."""
    if obj is None:
        return "-"
    files = []
    for cls in type(obj).__mro__:
        mod = sys.modules.get(cls.__module__)
        f = getattr(mod, "__file__", None)
        third_party = (
            f and ("privnlp" not in f) and ("site-packages" in f or f.startswith(sys.base_prefix))
        )
        if f and f not in files and not third_party:  # privnlp's and the user's own code
            files.append(f)
    out = []
    for f in files:
        if f not in _CODE_IDS:
            try:
                _CODE_IDS[f] = hashlib.sha256(Path(f).read_bytes()).hexdigest()[:12]
            except OSError:
                _CODE_IDS[f] = "?"
        out.append(_CODE_IDS[f])
    return "-".join(out)


def _mech_identity(mechanism: Any) -> Any:
    if mechanism is None:
        return "undefended"
    params = mechanism.params() if hasattr(mechanism, "params") else repr(mechanism)
    return [
        type(mechanism).__module__,
        type(mechanism).__qualname__,
        getattr(mechanism, "name", ""),
        params,
    ]


def _scenario_identity(scenario: Any) -> Any:
    params = {k: v for k, v in vars(scenario).items() if not k.startswith("_")}
    return [type(scenario).__module__, type(scenario).__qualname__, _jsonable(params)]


def _read(path: Path | None) -> Any:
    if path is None or not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        path.unlink(missing_ok=True)  # a corrupted entry is recomputed
        return None


def _run_one(
    mechanism: Any, scenario: Scenario, attacks: Sequence[Attack], seed: int, cache_dir: Path | None
) -> SeedOutcome:
    """Run ``scenario`` once for ``seed`` and every attack on its trials.

    The cache holds one entry per (system, scenario, attack, seed) and one for the utility, so an
    interrupted audit resumes, and the undefended baseline of a scenario is computed once for all
    the defenses that share it (``privnlp evaluate --all``).
    """
    sys_id, scen_id = _mech_identity(mechanism), _scenario_identity(scenario)
    code = [_code_id(mechanism), _code_id(scenario)]
    # issue #17: the numerics (pinned threads, CPU kernels, library versions) and all of privnlp's
    # source (victim builders, metrics, helpers) are part of the key, not only the classes' own files

    code = code + [numerics_fingerprint(), source_fingerprint()]
    keys = {
        a.name: _key(
            "v5", sys_id, scen_id, type(a).__qualname__, a.params(), seed, code + [_code_id(a)]
        )
        for a in attacks
    }
    ukey = _key("v4-utility", sys_id, scen_id, seed, code)
    paths = {n: (cache_dir / f"{k}.json" if cache_dir else None) for n, k in keys.items()}
    upath = cache_dir / f"{ukey}.json" if cache_dir else None
    cached = {n: _read(p) for n, p in paths.items()}
    util = _read(upath)
    missing = [a for a in attacks if cached[a.name] is None]
    if not missing and util is not None:
        return SeedOutcome(seed, {n: v for n, v in cached.items() if v}, util)

    with pinned_threads():  # issue #17: the thread count changes trained victims and attack results
        return _compute_one(mechanism, scenario, attacks, missing, seed, cached, paths, upath)


def _compute_one(
    mechanism: Any,
    scenario: Scenario,
    attacks: Sequence[Attack],
    missing: Sequence[Attack],
    seed: int,
    cached: dict[str, Any],
    paths: Mapping[str, Path | None],
    upath: Path | None,
) -> SeedOutcome:
    ss = np.random.SeedSequence([seed, 0x5EED])
    scen_seed, atk_seed = ss.spawn(2)
    run: ScenarioRun = scenario.run(mechanism, rng=np.random.default_rng(scen_seed))
    # one independent stream per attack, derived from its name: results do not depend on which
    # other attacks ran in the same audit (so per-attack cache entries are interchangeable)
    for atk in missing:
        name_seed = int.from_bytes(hashlib.sha256(atk.name.encode()).digest()[:4], "little")
        attack_rngs = np.random.default_rng([*atk_seed.generate_state(2), name_seed])
        acc: dict[str, list[float]] = defaultdict(list)
        for trial in run.trials:
            if not atk.applies_to(trial.observation):
                continue
            res = atk.run(
                trial.observation, rng=np.random.default_rng(attack_rngs.integers(0, 2**63 - 1))
            )
            for k, v in res.score(trial.ground_truth).items():
                acc[k].append(float(v))
        metrics = {k: [float(x) for x in v] for k, v in acc.items()}  # one value per trial
        cached[atk.name] = metrics
        if paths[atk.name] is not None:
            atomic_write_text(paths[atk.name], json.dumps(_jsonable(metrics)))
    util = {k: float(v) for k, v in run.utility.items()}
    if upath is not None:
        atomic_write_text(upath, json.dumps(_jsonable(util)))
    return SeedOutcome(seed, {n: v for n, v in cached.items() if v}, util)


def _as_float(v: Any) -> float:
    return (
        float(v)
        if v is not None and not isinstance(v, str)
        else (float(v) if isinstance(v, str) and v in ("inf", "-inf", "nan") else math.nan)
    )


def _trial_values(v: Any) -> list[float]:
    return [_as_float(x) for x in v] if isinstance(v, list) else [_as_float(v)]


def _seed_mean(values: list[float]) -> float:
    ok = [x for x in values if not math.isnan(x)]
    return float(np.mean(ok)) if ok else math.nan


def _collect(
    outcomes: Sequence[SeedOutcome],
) -> tuple[dict[str, dict[str, MetricSummary]], dict[str, MetricSummary]]:
    """Confidence intervals over seeds (the mean of each seed's trials); with a single seed, over
    that seed's trials (independent batches / records of one run)."""
    per: dict[str, dict[str, list[list[float]]]] = defaultdict(lambda: defaultdict(list))
    util: dict[str, list[float]] = defaultdict(list)
    for o in outcomes:
        for a, ms in o.attack_metrics.items():
            for k, v in ms.items():
                per[a][k].append(_trial_values(v))
        for k, v in o.utility.items():
            util[k].append(float(v))
    out: dict[str, dict[str, MetricSummary]] = {}
    for a, ms in per.items():
        out[a] = {}
        for k, runs in ms.items():
            out[a][k] = (
                summarize([_seed_mean(r) for r in runs]) if len(runs) > 1 else summarize(runs[0])
            )
    return out, {k: summarize(v) for k, v in util.items()}


def audit(
    mechanism: Any,
    scenario: Any = None,
    attacks: Iterable[Any] | None = None,
    *,
    seeds: Sequence[int] = (0, 1, 2),
    preset: str = "quick",
    baseline: bool = True,
    leaky_twin: bool = False,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
    figures: bool = True,
) -> LeakageReport:
    """Audit ``mechanism`` against its paired attacks on ``scenario``.

    Args:
        mechanism: a registered name, a :class:`Mechanism` (class or instance), or any object
            with ``claim()`` (wrap plain callables in :class:`FunctionMechanism`).
        scenario: registered name / Scenario; default: the mechanism's ``scenario``.
        attacks: names / Attack instances; default: the mechanism's ``paired_attacks`` that apply.
        seeds: one scenario run per seed; confidence intervals are over seeds.
        preset: ``"quick"`` (CI), ``"full"`` or ``"realistic"`` (pretrained / real-text victims where the
            scenario has them, :mod:`privnlp.evaluation.realistic`; quick sizes elsewhere).
        baseline: also run the undefended system (mechanism ``None``) on the same seeds.
        leaky_twin: also run the mechanism's registered leaky twin (a sanity check that the
            attacks can tell a broken defense from the real one).
        cache_dir: per-(mechanism, scenario, attack, seed) result cache; reruns resume.
    """
    if not seeds:
        raise InvalidArgument("seeds must contain at least one seed")
    mech = resolve_mechanism(mechanism, preset)
    scen_specs = scenario if scenario is not None else getattr(mech, "scenario", None)
    if isinstance(scen_specs, (list, tuple)):
        scens = [resolve_scenario(s_, mech, preset) for s_ in scen_specs]
    else:
        scens = [resolve_scenario(scen_specs, mech, preset)]
    atks = resolve_attacks(attacks, mech, preset)
    notes = []
    if attacks is None:  # the paired attacks: skip those whose headline is not a measurement here
        skipped = [a for a in atks if preset in getattr(a, "unmeasured_presets", {})]
        for a in skipped:
            notes.append(
                f"{a.name}: not measured in the {preset} preset: {a.unmeasured_presets[preset]}"
            )
        atks = [a for a in atks if a not in skipped]
    cache = Path(cache_dir) if cache_dir else None
    if cache:
        cache.mkdir(parents=True, exist_ok=True)

    systems: list[tuple[str, Any]] = [("defended", mech)]
    if baseline:
        systems.append(("undefended", None))
    twin = None
    if leaky_twin and getattr(mech, "name", None) in LEAKY_TWINS.load_all():
        twin_cls = LEAKY_TWINS.get(mech.name)
        twin = twin_cls.example(base_preset(preset)) if hasattr(twin_cls, "example") else twin_cls()
        systems.append(("leaky_twin", twin))

    multi = len(scens) > 1
    attack_metrics: list[AttackMetrics] = []
    util_def: dict[str, MetricSummary] = {}
    util_und: dict[str, MetricSummary] = {}
    bar = tqdm(
        total=len(scens) * len(systems) * len(seeds),
        desc=f"audit {getattr(mech, 'name', 'mechanism')}",
        disable=not progress,
        leave=False,
    )
    for scen in scens:
        scen_name = getattr(scen, "name", type(scen).__name__)
        outcomes: dict[str, list[SeedOutcome]] = defaultdict(list)
        for label, system in systems:
            for s in seeds:
                outcomes[label].append(_run_one(system, scen, atks, int(s), cache))
                bar.update(1)
        defended, u_def = _collect(outcomes["defended"])
        undefended, u_und = _collect(outcomes.get("undefended", []))
        twin_m, _ = _collect(outcomes.get("leaky_twin", []))
        pre = f"{scen_name}: " if multi else ""
        util_def.update({pre + k: v for k, v in u_def.items()})
        util_und.update({pre + k: v for k, v in u_und.items()})
        for atk in atks:
            if atk.name not in defended:
                continue
            attack_metrics.append(
                AttackMetrics(
                    attack=atk.name,
                    headline_metric=atk.headline_metric,
                    defended=defended[atk.name],
                    undefended=undefended.get(atk.name, {}),
                    threat_model=getattr(atk, "threat_model", None),
                    params=_jsonable({**atk.params(), "scenario": scen_name}),
                    leaky_twin=twin_m.get(atk.name, {}),
                )
            )
    bar.close()
    scen = scens[0]

    eps_lb = None
    for a in attack_metrics:
        for k in ("empirical_epsilon_lower_bound", "empirical_epsilon"):
            if k in a.defended and not math.isnan(a.defended[k].mean):
                eps_lb = max(eps_lb or 0.0, a.defended[k].mean)

    threat_models = tuple(getattr(mech, "threat_models", ()) or ())
    if not threat_models:
        threat_models = tuple(
            x.threat_model for x in scens if getattr(x, "threat_model", None) is not None
        )
    if not attack_metrics:
        applicable = [a.name for a in atks]
        notes.append(
            "no paired attack produced a measurement on this scenario "
            f"(attacks tried: {applicable or 'none registered'})"
        )
    report = LeakageReport(
        mechanism=getattr(mech, "name", type(mech).__name__),
        claim=mech.claim(),
        threat_models=threat_models,
        attacks=tuple(attack_metrics),
        utility=util_def,
        utility_undefended=util_und,
        empirical_epsilon_lower_bound=eps_lb,
        config={
            "mechanism": mech.params() if hasattr(mech, "params") else repr(mech),
            "scenario": ", ".join(getattr(x, "name", type(x).__name__) for x in scens),
            "preset": preset,
            "device": ", ".join(sorted({str(getattr(x, "device", "cpu")) for x in scens})),
            "attacks": {a.name: a.params() for a in atks},
            "leaky_twin": twin.params() if twin is not None and hasattr(twin, "params") else None,
        },
        seeds=tuple(int(s) for s in seeds),
        versions=package_versions(),
        notes=tuple(notes),
    )
    report = _with_environment(report)
    if figures and attack_metrics:
        report = _with_figures(report, (headline_bar_figure(report),))
    return report


def _with_figures(report: LeakageReport, figs: Sequence[Any]) -> LeakageReport:
    return replace(report, figures=tuple(report.figures) + tuple(figs))


def _with_environment(report: LeakageReport) -> LeakageReport:
    """``config["environment"]``: what the numbers depend on besides code and seeds (issue #17)."""

    return replace(report, config={**report.config, "environment": environment()})
