"""`privnlp evaluate`: reports for every defense and the leakage cards under ``cards/mechanisms/``.

A mechanism card (``cards/mechanisms/<name>/README.md``) is rendered *only* from the report file
next to it (``cards/mechanisms/<name>/report.json``), so every number in a card comes from a
report produced by the code; a conformance test re-renders each card from its JSON and
compares.
"""

from __future__ import annotations

import html as _html
import inspect
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from privnlp.auditing.render import audit_card_lines, audit_index_text
from privnlp.auditing.runner import audit_report
from privnlp.core.errors import InvalidArgument
from privnlp.core.numerics import environment
from privnlp.core.registry import ATTACKS, MECHANISMS, SCENARIOS
from privnlp.core.report import (
    MIN_INTERVAL_N,
    TOO_WEAK_FLAG,
    LeakageReport,
    atomic_write_text,
    package_versions,
)

from .audit import audit, resolve_scenario
from .overview import overview_html
from .realistic import base_preset
from .reproducibility import carry_cpu_intervals
from .sweep import sweep

__all__ = [
    "PRESETS",
    "EvaluationOutcome",
    "evaluate_defense",
    "evaluate_all",
    "render_mechanism_card",
    "card_text",
    "write_index",
]

#: seeds per preset (quick = CI / make demo; full = make repro)
PRESETS = {
    "quick": {"seeds": (0,)},
    "full": {"seeds": (0, 1, 2, 3, 4)},
    "realistic": {"seeds": (0,)},
}
# realistic (issue #17): pretrained MiniLM / the 4-layer GPT-2 on Debian text in fedsgd.eavesdropper and
# lm.canary (privnlp.evaluation.realistic); quick sizes and mechanism examples elsewhere; no sweeps
# quick: one seed, confidence intervals over its trials (independent batches / records); full: over seeds


@dataclass(frozen=True)
class EvaluationOutcome:
    name: str
    report: LeakageReport
    paths: dict
    seconds: float
    card: Path | None = None


def _first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    doc = inspect.cleandoc(doc)
    return doc.split("\n\n")[0].replace("\n", " ").strip()


def card_text(name: str, report: LeakageReport, folder: Path) -> str:
    """The card of registered defense ``name``: :func:`render_mechanism_card` of ``report`` with the
    class's docstring and paper, the hand-written ``folder/NOTES.md`` and, where the realistic reproduction wrote
    one, ``folder/REALISTIC.md`` (issue #17: ``tests/gradient/test_realistic_repro.py``, numbers from the
    ``results_realistic.json`` next to it) -- the one rendering used by ``privnlp evaluate --cards``,
    ``scripts/render_cards.py`` and the conformance test."""
    cls = MECHANISMS.get(name)
    extra = [
        p.read_text()
        for p in (Path(folder) / "NOTES.md", Path(folder) / "REALISTIC.md")
        if p.exists()
    ]
    return render_mechanism_card(
        report,
        description=_first_paragraph(cls.__doc__),
        paper=getattr(cls, "paper", ""),
        command=f"privnlp evaluate --defense {name} --preset {report.config.get('preset', 'quick')}"
        + (" --audit-dp" if "dp_audit" in report.config else ""),
        notes_md="\n\n".join(t.strip() for t in extra) + ("\n" if extra else ""),
    )


def _mode_lines(per_mode: Any) -> list[str]:
    """The card's table of the claim per adversary in each deployment mode (``config["claims_per_mode"]``)."""
    if not per_mode or not per_mode.get("modes"):
        return []
    lines = [
        "**Claim per adversary and deployment mode** (user level, the same rounds, clients and noise "
        f"multiplier; the model has d = {per_mode['dim']} trainable coordinates):",
        "",
        "| mode | adversary | observes | epsilon | delta | amplified | accountant |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, bounds in per_mode["modes"].items():
        for b in bounds:
            eps = float(b["epsilon"])
            lines.append(
                f"| {mode} | {b['adversary']} | {b['observes']} | "
                f"{'inf' if math.isinf(eps) else f'{eps:.4g}'} | {float(b['delta']):.3g} | "
                f"{'yes' if b['amplified'] else 'no'} | {b['accountant']} |"
            )
    lines += [
        "",
        "The headline above is the central mode's strongest adversary (the mode the measured run "
        "used); the notes of each bound are in `report.json` (`config.claims_per_mode`).",
        "",
    ]
    return lines


def render_mechanism_card(
    report: LeakageReport,
    *,
    description: str = "",
    paper: str = "",
    command: str = "",
    notes_md: str = "",
) -> str:
    """Markdown card for a mechanism, from its report only (plus static class text).

    Args:
        report: the defense's report.
        description: the card's first paragraph (the class docstring's).
        paper: the paper line.
        command: the command that reproduces the report.
        notes_md: extra Markdown appended (the folder's ``NOTES.md``).

    Returns:
        The card, as Markdown.
    """
    name = report.mechanism
    cfg = report.config
    lines = [f"# `{name}`", ""]
    if description:
        lines += [description, ""]
    if paper:
        lines += [f"**Paper:** {paper}", ""]
    lines += [
        f"**Claim:** {report.claim.headline()}",
        "",
        f"Details: {report.claim.statement()}",
        "",
    ]
    if report.threat_models:
        lines += (
            ["**Threat models:**", ""] + [f"- {t.describe()}" for t in report.threat_models] + [""]
        )
    lines += _mode_lines(cfg.get("claims_per_mode"))
    lines += [
        f"## Measured leakage ({cfg.get('preset', '?')} preset, scenario `{cfg.get('scenario', '?')}`)",
        "",
    ]
    if report.attacks:
        header = ["attack", "metric", "undefended", "defended"] + (
            ["leaky twin"] if report.has_twin else []
        )
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in report._attack_rows()]
        lines += [
            "",
            "Mean ± 95% CI half-width over seeds (clipped to the metric's range: then [low, high]; "
            f"(n=k): fewer than {MIN_INTERVAL_N} values, no interval); the headline metric is oriented so that higher = "
            "more leakage. The *leaky twin* is a deliberately broken copy of the defense "
            "(`privnlp.mechanisms.testing`), shown to prove that the attacks can see the difference; "
            f"where it does not leak more than the defense, the row says *{TOO_WEAK_FLAG}*: that "
            "attack's defended number is no evidence for the defense.",
            "",
        ]
        if cfg.get(
            "cpu_intervals"
        ):  # issue #17: numbers that legitimately depend on the CPU's kernels
            spans = "; ".join(
                f"{a} {s_}: [{lo:.3f}, {hi:.3f}]"
                for a, by in cfg["cpu_intervals"].items()
                for s_, (lo, hi) in by.items()
            )
            lines += [
                f"**CPU-dependent:** these headline numbers change with the CPU's float kernels (same code and "
                f"seeds); the interval measured across the runs CI made: {spans} "
                f"({'; '.join(cfg.get('cpu_interval_environments', []))}). `make check-cards` accepts any "
                "value inside it.",
                "",
            ]
    else:
        lines += ["No paired attack produced a measurement yet; see notes.", ""]
    if report.empirical_epsilon_lower_bound is not None:
        lines += [
            f"**Empirical epsilon lower bound:** {report.empirical_epsilon_text()}",
            "",
        ]

    lines += audit_card_lines(report)
    if report.utility:
        lines += ["## Utility cost", "", "| metric | undefended | defended |", "|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in report._utility_rows()] + [""]
    if report.figures:
        lines += (
            ["## Figures", ""]
            + [f"![{f.caption or f.name}]({name}-{f.name}.png)" for f in report.figures]
            + [""]
        )
    if report.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in report.notes] + [""]
    if notes_md.strip():
        lines += [
            "## Developer notes",
            "",
            "(hand-written, kept in `NOTES.md` next to this card)",
            "",
            notes_md.strip(),
            "",
        ]
    lines += [
        "## Reproduce",
        "",
        "```bash",
        command or f"privnlp evaluate --defense {name} --preset {cfg.get('preset', 'quick')}",
        "```",
        "",
        f"- seeds: {list(report.seeds)}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items()),
        *(
            [("- environment: " + ", ".join(f"{k} {v}" for k, v in cfg["environment"].items()))]
            if isinstance(cfg.get("environment"), dict)
            else []
        ),  # issue #17: threads, CPU, versions
        f"- generated: {report.created} from `report.json` in this folder (do not edit by hand)",
        "",
    ]
    return "\n".join(lines)


def _sweep_for(cls: Any, mech: Any, preset: str, seeds: Sequence[int], cache_dir: Any) -> Any:
    grid = getattr(cls, "sweep_grid", None)
    if grid is None:
        return None
    spec = grid(preset)
    if not spec:
        return None
    param, values = spec
    attacks = [a for a in getattr(mech, "paired_attacks", ()) if a in ATTACKS.load_all()]
    if not attacks:
        return None
    spec_s = getattr(mech, "scenario", None)
    scen = resolve_scenario(
        spec_s[0] if isinstance(spec_s, (list, tuple)) else spec_s, mech, preset
    )
    utility = getattr(scen, "primary_utility", None)
    if utility is None:
        return None
    return sweep(
        {mech.name: (mech, param, values)},
        attack=attacks[0],
        utility=utility,
        seeds=seeds[:1],
        scenario=scen,
        preset=preset,
        cache_dir=cache_dir,
        title=f"{mech.name}: privacy-utility ({param})",
    )


def _with_deployment_claims(
    report: LeakageReport, mech: Any, specs: Sequence[str], preset: str
) -> LeakageReport:
    """Add ``config["claims_per_mode"]`` where the mechanism states its claim per deployment mode
    (``deployment_claims(dim=...)``, e.g. DP-FedAvg's central noise vs SecAgg+ with distributed noise)
    and its scenario knows the model's size (``model_parameters(preset)``)."""
    modes = getattr(mech, "deployment_claims", None)
    scen = SCENARIOS.get(specs[0]) if specs else None
    dim_of = getattr(scen, "model_parameters", None)
    if not (callable(modes) and callable(dim_of)):
        return report
    dim = int(dim_of(preset))
    per_mode = {k: [b.to_dict() for b in v] for k, v in modes(dim=dim).items()}
    return replace(
        report, config={**report.config, "claims_per_mode": {"dim": dim, "modes": per_mode}}
    )


def _keep_cpu_intervals(report: LeakageReport, previous: dict) -> LeakageReport:
    """Issue #17: a regenerated card keeps the CPU-dependent intervals of the card it replaces, for the
    attacks it still measures (an interval of an attack no longer measured, e.g. quick LAMP, is dropped:
    ``carry_cpu_intervals`` raised a KeyError when none was left)."""
    measured = {a.attack for a in report.attacks}
    if not set(previous.get("config", {}).get("cpu_intervals") or {}) & measured:
        return report
    return carry_cpu_intervals(report, previous)


def evaluate_defense(
    name: str,
    *,
    preset: str = "quick",
    report_dir: str | Path = "reports",
    cards_dir: str | Path | None = None,
    seeds: Sequence[int] | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    sweeps: bool = True,
    audit_dp: bool = False,
) -> EvaluationOutcome:
    """Audit one registered defense (with baseline and leaky twin) and write its report (+ card).

    Args:
        name: the defense's registry name.
        preset: a key of :data:`PRESETS` (``"quick"``, ``"full"``, ``"realistic"``).
        report_dir: where ``<name>/report.json`` (and HTML / Markdown) is written.
        cards_dir: where the card is written (``None`` = no card).
        seeds: the seeds (default: the preset's).
        cache_dir: the attack / audit result cache (``None`` = no cache).
        progress: show progress bars.
        sweeps: add the privacy-utility sweep where the defense defines one (not for ``"realistic"``).
        audit_dp: also run the registered DP audit (``privnlp evaluate --audit-dp``).

    Returns:
        The outcome (report, paths, seconds).

    Raises:
        InvalidArgument: an unknown ``preset`` or defense name.
    """
    if preset not in PRESETS:
        raise InvalidArgument(f"preset must be one of {sorted(PRESETS)}; got {preset!r}")
    cls = MECHANISMS.get(name)
    t0 = time.perf_counter()
    seeds = tuple(seeds if seeds is not None else PRESETS[preset]["seeds"])
    mech = cls.example(base_preset(preset))
    spec = getattr(mech, "scenario", None)
    specs = list(spec) if isinstance(spec, (list, tuple)) else ([spec] if spec else [])
    has_scenario = bool(specs) and all(x in SCENARIOS.load_all() for x in specs)
    if has_scenario:
        report = audit(
            mech,
            seeds=seeds,
            preset=preset,
            leaky_twin=True,
            cache_dir=cache_dir,
            progress=progress,
        )
        sw = (
            _sweep_for(cls, mech, preset, seeds, cache_dir)
            if sweeps and preset != "realistic"
            else None
        )
        if sw is not None and sw.curves and any(c.points for c in sw.curves):
            report = replace(
                report,
                figures=report.figures + ((sw.figure,) if sw.figure else ()),
                sweeps={"primary": sw.to_dict()},
            )
    else:
        report = LeakageReport(
            mechanism=name,
            claim=mech.claim(),
            threat_models=tuple(getattr(mech, "threat_models", ())),
            attacks=(),
            config={
                "mechanism": mech.params(),
                "preset": preset,
                "scenario": getattr(mech, "scenario", None),
                "environment": environment(),
            },  # issue #17
            seeds=seeds,
            versions=package_versions(),
            notes=(
                f"scenario {getattr(mech, 'scenario', None)!r} is not registered, so no "
                "leakage was measured for this defense yet.",
            ),
        )
    report = _with_deployment_claims(report, mech, specs, base_preset(preset))
    if audit_dp:  # issue #18: empirical DP audit (cached), fills empirical_epsilon_lower_bound
        report = audit_report(
            report, name, preset=base_preset(preset), seed=int(seeds[0]), cache_dir=cache_dir
        )
    paths = report.save(report_dir, name)
    card = None
    if cards_dir is not None:
        d = Path(cards_dir) / name
        d.mkdir(parents=True, exist_ok=True)
        previous = (
            json.loads((d / "report.json").read_text()) if (d / "report.json").exists() else {}
        )
        measured = {a.attack for a in report.attacks}
        if set(previous.get("config", {}).get("cpu_intervals") or {}) & measured:
            # issue #17: keep the CPU-dependent intervals the card states (of attacks still measured)
            report = carry_cpu_intervals(report, previous)
        atomic_write_text(d / "report.json", report.to_json())
        for f in report.figures:
            (d / f"{name}-{f.name}.png").write_bytes(f.png)
        card = d / "README.md"
        notes = d / "NOTES.md"
        if card.exists() and not notes.exists() and "generated:" not in card.read_text():
            # first generation: keep the hand-written card as developer notes
            card.replace(notes)
        atomic_write_text(card, card_text(name, report, card.parent))
    return EvaluationOutcome(
        name, report, {k: str(v) for k, v in paths.items()}, time.perf_counter() - t0, card
    )


def write_index(
    outcomes: Sequence[EvaluationOutcome], report_dir: str | Path, *, failures: dict | None = None
) -> Path:
    """A self-contained HTML index of all reports (claim + headline numbers + links)."""
    e = _html.escape
    rows = []
    for o in outcomes:
        head = o.report.headline()
        cells = (
            "; ".join(
                f"{a}: {v.get('undefended', math.nan):.3f} → {v.get('defended', math.nan):.3f}"
                + (f" ({TOO_WEAK_FLAG})" if v.get("attack_too_weak") else "")
                for a, v in head.items()
            )
            or "—"
        )

        audited = audit_index_text(o.report)
        claim_cell = (
            f"<b>{e(o.report.claim.headline())}</b><br><small>{e(o.report.claim.statement())}</small>"
            + (f"<br><b>{e(audited)}</b>" if audited else "")
        )
        rows.append(
            f"<tr><td><a href='{e(o.name)}.html'>{e(o.name)}</a></td><td>{claim_cell}</td>"
            f"<td>{e(cells)}</td><td>{o.seconds:.1f}s</td></tr>"
        )
    for name, err in (failures or {}).items():
        rows.append(f"<tr><td>{e(name)}</td><td colspan='3'>FAILED: {e(err)}</td></tr>")
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>privnlp leakage reports</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}</style>"
        "</head><body><h1>privnlp: every defense with its measured leakage</h1>"
        "<p>Headline metric of each paired attack, undefended → defended (higher = more leakage).</p>"
        + _overview(
            outcomes, report_dir
        )  # issue #17: heatmap + privacy-utility scatter (PNG/SVG too)
        + "<table><thead><tr><th>defense</th><th>claim</th><th>attacks (undefended → defended)</th><th>time</th></tr>"
        "</thead><tbody>" + "".join(rows) + "</tbody></table></body></html>"
    )
    return atomic_write_text(Path(report_dir) / "index.html", page)


def _overview(outcomes: Sequence[EvaluationOutcome], report_dir: str | Path) -> str:
    Path(report_dir).mkdir(parents=True, exist_ok=True)
    return overview_html([o.report for o in outcomes], report_dir)


def evaluate_all(
    *,
    preset: str = "quick",
    report_dir: str | Path = "reports",
    cards_dir: str | Path | None = None,
    names: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    keep_going: bool = False,
    audit_dp: bool = False,
) -> tuple[list[EvaluationOutcome], dict[str, str]]:
    """Evaluate every registered defense (or ``names``); returns outcomes and failures.

    Args:
        preset: a key of :data:`PRESETS`.
        report_dir: where the reports and ``index.html`` are written.
        cards_dir: where the cards are written (``None`` = no cards).
        names: the defenses to evaluate (default: every registered one).
        cache_dir: the attack / audit result cache.
        progress: show progress bars.
        keep_going: record a failing defense in the failures and continue (otherwise re-raise).
        audit_dp: also run the registered DP audits.

    Returns:
        ``(outcomes, failures)``, failures mapping a name to its error.
    """
    names = list(names) if names else MECHANISMS.names()
    outcomes, failures = [], {}
    for n in names:
        try:
            outcomes.append(
                evaluate_defense(
                    n,
                    preset=preset,
                    report_dir=report_dir,
                    cards_dir=cards_dir,
                    cache_dir=cache_dir,
                    progress=progress,
                    audit_dp=audit_dp,
                )
            )
        except Exception as exc:  # noqa: BLE001 - reported, and re-raised unless keep_going
            if not keep_going:
                raise
            failures[n] = f"{type(exc).__name__}: {exc}"
    write_index(outcomes, report_dir, failures=failures)
    return outcomes, failures
