"""Run the registered DP audit of a defense (and of its leaky twin), with a result cache, and attach it to
a :class:`~privnlp.core.report.LeakageReport` (``privnlp evaluate --audit-dp``).

The cache holds one JSON file per (defense, system, preset, seed, confidence, code): the key includes a
fingerprint of the source files of the audit and of the audited classes (as the attack cache of
:mod:`privnlp.evaluation.audit` does), so a changed mechanism or audit is re-audited, and an interrupted
``evaluate`` resumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from privnlp.core.registry import AUDITS, LEAKY_TWINS, MECHANISMS
from privnlp.core.report import atomic_write_text

from .result import DEFAULT_CONFIDENCE, DPAuditResult, DPAuditSuite

__all__ = ["run_dp_audit", "audit_report", "has_audit", "CACHE_VERSION"]

CACHE_VERSION = "dp-audit-v1"


def has_audit(name: str) -> bool:
    """Whether a DP audit is registered for the defense ``name`` (a defense without a DP claim has none).

    Args:
        name: the mechanism's registry name.
    """
    return name in AUDITS.load_all()


def _files_of(obj: Any) -> list[str]:
    files = []
    classes = type(obj).__mro__ if not isinstance(obj, type) else obj.__mro__
    for cls in classes:
        f = getattr(sys.modules.get(cls.__module__), "__file__", None)
        if f and "privnlp" in f and f not in files:
            files.append(f)
    return files


def _fingerprint(files: list[str]) -> str:
    h = hashlib.sha256()
    for f in sorted(set(files)):
        try:
            h.update(Path(f).read_bytes())
        except OSError:
            h.update(f.encode())
    return h.hexdigest()[:16]


def _audit_files(fn: Any) -> list[str]:
    """The analysis code (bounds, results, the shared helpers of training.py) and the audit's own module."""
    here = Path(__file__).resolve().parent
    mod = getattr(getattr(fn, "func", fn), "__module__", "")
    own = getattr(sys.modules.get(mod), "__file__", None)
    return [str(here / f) for f in ("bounds.py", "result.py", "training.py")] + (
        [own] if own else []
    )


def _run_system(
    name: str,
    system: str,
    cls: Any,
    *,
    preset: str,
    seed: int,
    confidence: float,
    cache_dir: Path | None,
) -> list[DPAuditResult]:
    fn = AUDITS.get(name)
    key = hashlib.sha256(
        json.dumps(
            [
                CACHE_VERSION,
                name,
                system,
                f"{cls.__module__}.{cls.__qualname__}",
                preset,
                int(seed),
                float(confidence),
                _fingerprint(_audit_files(fn) + _files_of(cls)),
            ]
        ).encode()
    ).hexdigest()[:24]
    path = cache_dir / f"dp-audit-{name}-{system}-{key}.json" if cache_dir else None
    if path is not None and path.exists():
        try:
            return [DPAuditResult.from_dict(d) for d in json.loads(path.read_text())]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            path.unlink(missing_ok=True)  # a corrupted entry is recomputed
    results = fn(
        cls, name=name, system=system, preset=preset, seed=int(seed), confidence=confidence
    )
    if path is not None:
        atomic_write_text(path, json.dumps([r.to_dict() for r in results]))
    return list(results)


def run_dp_audit(
    name: str,
    *,
    preset: str = "quick",
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    twin: bool = True,
    cache_dir: str | os.PathLike | None = None,
) -> DPAuditSuite:
    """Audit the registered DP defense ``name`` (and its registered leaky twin with ``twin=True``).

    The audits are cached under ``cache_dir`` (keyed by the source of the audit and of the audited
    classes), so an unchanged defense is not re-audited.

    Args:
        name: the registry name of a defense with a registered audit.
        preset: ``"quick"`` (CI-sized) or ``"full"``.
        seed: the audit's seed.
        confidence: the probability that each lower bound holds, in (0, 1).
        twin: also audit the registered leaky twin (a sanity check: its bound should exceed its claim).
        cache_dir: where audit results are cached (``None`` = no cache).

    Returns:
        Every audit result of the defense (and its twin).

    Raises:
        InvalidArgument: ``name`` is not a registered mechanism or has no registered audit.
    """
    cache = Path(cache_dir) if cache_dir else None
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
    results = _run_system(
        name,
        "defense",
        MECHANISMS.get(name),
        preset=preset,
        seed=seed,
        confidence=confidence,
        cache_dir=cache,
    )
    if twin and name in LEAKY_TWINS.load_all():
        results += _run_system(
            name,
            "leaky_twin",
            LEAKY_TWINS.get(name),
            preset=preset,
            seed=seed,
            confidence=confidence,
            cache_dir=cache,
        )
    return DPAuditSuite(
        name, preset, int(seed), tuple(results), float(sum(r.seconds for r in results))
    )


def audit_report(
    report: Any,
    name: str,
    *,
    preset: str = "quick",
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
) -> Any:
    """``report`` with the DP audit of ``name`` attached (``config["dp_audit"]``) and
    ``empirical_epsilon_lower_bound`` set to the headline audit of the defense; unchanged when no audit
    is registered for ``name`` (a defense without a DP claim).

    Args:
        report: the defense's :class:`~privnlp.core.report.LeakageReport`.
        name: the defense's registry name.
        preset: ``"quick"`` or ``"full"``.
        seed: the audit's seed.
        cache_dir: where audit results are cached (``None`` = no cache).

    Returns:
        A new report (``dataclasses.replace``); ``report`` itself when no audit is registered for ``name``.
    """
    if not has_audit(name):
        return report
    suite = run_dp_audit(name, preset=preset, seed=seed, cache_dir=cache_dir)
    head = suite.headline
    audited_claim = None
    if head is not None:
        audited_claim = (
            f"({head.claimed_epsilon:.4g}, {head.claimed_delta:.3g})-DP per {head.unit} "
            f"({head.variant}; {head.audited.method}, confidence {head.audited.confidence:g})"
        )
    return replace(
        report,
        empirical_epsilon_lower_bound=head.audited.epsilon if head else None,
        audited_claim=audited_claim,
        config={**dict(report.config), "dp_audit": suite.to_dict()},
    )
