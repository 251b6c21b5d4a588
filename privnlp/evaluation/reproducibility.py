"""Reproducible cards (issue #17): compare a regenerated report with the committed one, and keep the
CPU-dependent intervals a card states.

A committed ``cards/mechanisms/<name>/report.json`` states, for each paired attack's headline metric and
each system (undefended / defended / leaky twin), a 95% interval ``[ci_low, ci_high]``. With torch
threads pinned (:mod:`privnlp.core.numerics`) a rerun on the same kind of CPU is bit-identical; a
number that still moves between CPU kernel families (AVX-512 vs AVX2 float kernels change the last
bits of a trained victim, and a one-trial LAMP reconstruction amplifies them) is recorded in
``config["cpu_intervals"][attack][system] = [low, high]`` with the environments it was measured
on, and the card says so. ``scripts/check_cards.py`` (``make check-cards``) uses :func:`compare`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

__all__ = ["SYSTEMS", "compare", "widen_intervals", "carry_cpu_intervals"]

SYSTEMS = ("undefended", "defended", "leaky_twin")


def _by_key(report: Mapping[str, Any]) -> dict:
    return {
        (a["attack"], a.get("params", {}).get("scenario")): a for a in report.get("attacks", [])
    }


def _interval(
    committed: Mapping[str, Any], attack: Mapping[str, Any], system: str
) -> tuple[float, float, str]:
    cpu = committed.get("config", {}).get("cpu_intervals", {}).get(attack["attack"], {}).get(system)
    if cpu:
        return float(cpu[0]), float(cpu[1]), "CPU-dependent interval stated in the card"
    s = attack[system][attack["headline_metric"]]
    return float(s["ci_low"]), float(s["ci_high"]), "95% interval of the committed report"


def compare(
    name: str, committed: Mapping[str, Any], fresh: Mapping[str, Any], atol: float = 1e-6
) -> list[str]:
    """One message per headline number of ``fresh`` outside ``committed``'s stated interval (+- ``atol``),
    naming the card, the attack, the metric and the system."""
    errs = []
    fresh_by = _by_key(fresh)
    for a in committed.get("attacks", []):
        m = a["headline_metric"]
        label = f"cards/mechanisms/{name}: {a['attack']} {m}"
        b = fresh_by.get((a["attack"], a.get("params", {}).get("scenario")))
        if b is None:
            errs.append(f"{label}: attack missing from the regenerated report")
            continue
        for system in SYSTEMS:
            if m not in a.get(system, {}):
                continue
            got = b.get(system, {}).get(m)
            if got is None:
                errs.append(f"{label} ({system}): missing from the regenerated report")
                continue
            lo, hi, what = _interval(committed, a, system)
            v = float(got["mean"])
            if math.isnan(v) and math.isnan(lo):
                continue
            if not (lo - atol <= v <= hi + atol):
                errs.append(
                    f"{label} ({system}) = {v:.4f}, outside the {what} [{lo:.4f}, {hi:.4f}]"
                )
    return errs


def _env_tag(env: Mapping[str, Any]) -> str:
    return f"{env.get('cpu_capability', '?')} kernels, {env.get('torch_threads', '?')} thread(s), {env.get('cpu_model', '?')}"


def widen_intervals(committed: dict, fresh: Mapping[str, Any]) -> dict:
    """``committed`` with ``config["cpu_intervals"]`` spanning its intervals and ``fresh``'s headline values
    (only the numbers that moved), and the environments of both in ``config["cpu_interval_environments"]``."""
    cfg = committed.setdefault("config", {})
    ci = cfg.setdefault("cpu_intervals", {})
    envs = cfg.setdefault("cpu_interval_environments", [])
    for env in (cfg.get("environment"), fresh.get("config", {}).get("environment")):
        if env and _env_tag(env) not in envs:
            envs.append(_env_tag(env))
    fresh_by = _by_key(fresh)
    for a in committed.get("attacks", []):
        b = fresh_by.get((a["attack"], a.get("params", {}).get("scenario")))
        m = a["headline_metric"]
        for system in SYSTEMS:
            if b is None or m not in a.get(system, {}) or m not in b.get(system, {}):
                continue
            old = ci.get(a["attack"], {}).get(system) or [
                a[system][m]["ci_low"],
                a[system][m]["ci_high"],
            ]
            v = float(b[system][m]["mean"])
            if v < old[0] or v > old[1]:
                ci.setdefault(a["attack"], {})[system] = [
                    min(float(old[0]), v),
                    max(float(old[1]), v),
                ]
    if not ci:
        cfg.pop("cpu_intervals")
        cfg.pop("cpu_interval_environments")
    return committed


def carry_cpu_intervals(report: Any, previous: Mapping[str, Any] | None) -> Any:
    """A regenerated :class:`LeakageReport` keeps the CPU-dependent intervals of the card it replaces,
    widened to include its own values (so ``privnlp evaluate --cards`` never drops what CI measured)."""
    if not previous or not previous.get("config", {}).get("cpu_intervals"):
        return report

    present = {a["attack"] for a in report.to_dict()["attacks"]}
    prev = {
        "config": {
            # an attack no longer in the report (e.g. declared unmeasured in this preset) drops its interval
            "cpu_intervals": {
                k: v for k, v in previous["config"]["cpu_intervals"].items() if k in present
            },
            "cpu_interval_environments": list(
                previous["config"].get("cpu_interval_environments", [])
            ),
        },
        "attacks": report.to_dict()["attacks"],
    }
    cur = report.to_dict()
    widened = widen_intervals(prev, cur)["config"]
    cfg = {
        **report.config,
        "cpu_intervals": widened["cpu_intervals"],
        "cpu_interval_environments": widened["cpu_interval_environments"],
    }
    return replace(report, config=cfg)
