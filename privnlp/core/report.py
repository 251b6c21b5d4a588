"""Leakage reports: claim + threat model + measured leakage + utility, rendered as
JSON (versioned schema), Markdown and self-contained HTML (figures embedded as base64 PNG).
"""

from __future__ import annotations

import base64
import datetime as _dt
import html as _html
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .claims import PrivacyClaim, ThreatModel, _jsonable

__all__ = [
    "SCHEMA_VERSION",
    "MetricSummary",
    "AttackMetrics",
    "Figure",
    "LeakageReport",
    "summarize",
    "package_versions",
    "atomic_write_text",
    "figure_from_matplotlib",
    "MIN_INTERVAL_N",
    "metric_range",
    "TOO_WEAK_FLAG",
]

SCHEMA_VERSION = "privnlp.report/1"
#: fewer finite values than this give no interval (a t interval from 2 trials is ~13 standard errors
#: wide and means nothing); the mean is shown with ``(n=...)``
MIN_INTERVAL_N = 3
#: shown beside a leaky twin that does not leak more than the defense (the attack cannot tell them apart)
TOO_WEAK_FLAG = "attack too weak here"
#: (pattern, (low, high)): the range of a metric, by its name; an interval is clipped to it
_METRIC_RANGES: tuple[tuple[re.Pattern[str], tuple[float, float]], ...] = (
    (
        re.compile(
            r"^(rouge\w*|\w*accuracy|\w*recall|\w*precision|f1|exact_match|in_top_k|"
            r"inclusion_rate.*|\w*_rate\w*)$"
        ),
        (0.0, 1.0),
    ),
    (
        re.compile(r"^(\w*exposure|\w*edit_distance|rank|log2_space|length_error|n_contigs)$"),
        (0.0, math.inf),
    ),
)


def metric_range(name: str) -> tuple[float, float] | None:
    """The range of a metric known by name (ROUGE / accuracy / recall / rates in [0, 1]; exposure, edit
    distance, rank >= 0), or ``None`` when unknown (no clipping)."""
    for pat, rng in _METRIC_RANGES:
        if pat.match(name):
            return rng
    return None


@dataclass(frozen=True)
class MetricSummary:
    """Mean and a 95% confidence interval (Student t over seeds/batches) of one metric.

    Attributes:
        mean: the mean of the finite values (NaN when there is none).
        ci_low: lower end of the confidence interval.
        ci_high: upper end of the confidence interval.
        n: the number of finite values.
        values: every value, NaNs included, in measurement order.
    """

    mean: float
    ci_low: float
    ci_high: float
    n: int
    values: tuple[float, ...] = ()

    def fmt(self, digits: int = 3) -> str:
        if math.isnan(self.mean):
            return "n/a"
        if 1 < self.n < MIN_INTERVAL_N:
            return f"{self.mean:.{digits}f} (n={self.n})"
        if self.n <= 1 or self.ci_low == self.ci_high:
            return f"{self.mean:.{digits}f}"
        half = (self.ci_high - self.ci_low) / 2
        if not math.isclose(self.mean - self.ci_low, self.ci_high - self.mean, abs_tol=1e-12):
            # clipped to the metric's range: show the interval itself
            return f"{self.mean:.{digits}f} [{self.ci_low:.{digits}f}, {self.ci_high:.{digits}f}]"
        return f"{self.mean:.{digits}f} ± {half:.{digits}f}"

    def clipped(self, lo: float, hi: float) -> MetricSummary:
        """The same summary with its interval clipped to the metric's range ``[lo, hi]``."""
        if math.isnan(self.ci_low) or (self.ci_low >= lo and self.ci_high <= hi):
            return self
        return MetricSummary(
            self.mean, max(lo, self.ci_low), min(hi, self.ci_high), self.n, self.values
        )

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(
            {
                "mean": self.mean,
                "ci_low": self.ci_low,
                "ci_high": self.ci_high,
                "n": self.n,
                "values": list(self.values),
            }
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MetricSummary:
        f = lambda x: float(x) if x is not None else math.nan  # noqa: E731
        return cls(
            f(d["mean"]),
            f(d["ci_low"]),
            f(d["ci_high"]),
            int(d["n"]),
            tuple(f(v) for v in d.get("values", ())),
        )


def summarize(
    values: Sequence[float],
    confidence: float = 0.95,
    *,
    value_range: tuple[float, float] | None = None,
) -> MetricSummary:
    """Mean with a Student-t confidence interval (none from fewer than :data:`MIN_INTERVAL_N` values).

    Args:
        values: the measurements (over seeds, batches or records); NaNs are dropped from the statistics.
        confidence: two-sided confidence level of the interval, in (0, 1).
        value_range: the metric's range; the interval is clipped to it (see also :func:`metric_range`,
            which :class:`AttackMetrics` applies by metric name).

    Returns:
        :class:`MetricSummary` (``mean``, ``ci_low``, ``ci_high``, ``n``, ``values``); all NaN when no value
        is finite, a zero-width interval (``ci_low == ci_high == mean``) for fewer than
        :data:`MIN_INTERVAL_N` values.
    """
    vals = np.asarray([float(v) for v in values], dtype=float)
    vals_ok = vals[~np.isnan(vals)]
    n = int(vals_ok.size)
    if n == 0:
        return MetricSummary(math.nan, math.nan, math.nan, 0, tuple(vals.tolist()))
    mean = float(vals_ok.mean())
    if n < MIN_INTERVAL_N:
        return MetricSummary(mean, mean, mean, n, tuple(vals.tolist()))
    from scipy import stats  # ~2 s to import; privnlp.core sits on every light path

    sem = float(vals_ok.std(ddof=1) / math.sqrt(n))
    h = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * sem) if sem > 0 else 0.0
    out = MetricSummary(mean, mean - h, mean + h, n, tuple(vals.tolist()))
    return out.clipped(*value_range) if value_range is not None else out


@dataclass(frozen=True)
class AttackMetrics:
    """One attack's metrics on the defended system, and on the undefended baseline.

    Attributes:
        attack: the attack's registry name.
        headline_metric: the metric key for which higher means more leakage.
        defended: metric -> summary on the defended system.
        undefended: metric -> summary on the undefended baseline.
        threat_model: the threat model the attack ran under.
        params: the attack's hyperparameters.
        leaky_twin: the same metrics on the mechanism's deliberately leaky twin, where one is registered.
    """

    attack: str
    headline_metric: str
    defended: Mapping[str, MetricSummary]
    undefended: Mapping[str, MetricSummary] = field(default_factory=dict)
    threat_model: ThreatModel | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    #: the same metrics on the mechanism's deliberately leaky twin, where one is registered
    leaky_twin: Mapping[str, MetricSummary] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # intervals clipped to each metric's range (a ROUGE interval never goes below 0)
        for name in ("defended", "undefended", "leaky_twin"):
            d = getattr(self, name)
            new = {}
            for k, v in d.items():
                r = metric_range(k)
                new[k] = v.clipped(*r) if r is not None else v
            object.__setattr__(self, name, new)

    @property
    def attack_too_weak(self) -> bool:
        """The leaky twin does not leak more than the defense on the headline metric: the attack cannot
        tell a broken defense from the real one here, so its "defended" number is no evidence."""
        tw, de = self.leaky_twin.get(self.headline_metric), self.defended.get(self.headline_metric)
        if tw is None or de is None or math.isnan(tw.mean) or math.isnan(de.mean):
            return False
        return tw.mean <= de.mean

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "headline_metric": self.headline_metric,
            "defended": {k: v.to_dict() for k, v in self.defended.items()},
            "undefended": {k: v.to_dict() for k, v in self.undefended.items()},
            "leaky_twin": {k: v.to_dict() for k, v in self.leaky_twin.items()},
            "threat_model": self.threat_model.to_dict() if self.threat_model else None,
            "params": _jsonable(dict(self.params)),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AttackMetrics:
        return cls(
            attack=d["attack"],
            headline_metric=d["headline_metric"],
            defended={k: MetricSummary.from_dict(v) for k, v in d["defended"].items()},
            undefended={k: MetricSummary.from_dict(v) for k, v in d.get("undefended", {}).items()},
            threat_model=ThreatModel.from_dict(d["threat_model"])
            if d.get("threat_model")
            else None,
            params=d.get("params", {}),
            leaky_twin={k: MetricSummary.from_dict(v) for k, v in d.get("leaky_twin", {}).items()},
        )


@dataclass(frozen=True)
class Figure:
    """A rendered plot: PNG bytes (base64 in JSON) and a caption.

    Attributes:
        name: a file-name-safe identifier.
        png: the PNG bytes.
        caption: the caption shown under the figure.
    """

    name: str
    png: bytes
    caption: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "caption": self.caption,
            "png_base64": base64.b64encode(self.png).decode(),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Figure:
        return cls(d["name"], base64.b64decode(d["png_base64"]), d.get("caption", ""))


def figure_from_matplotlib(fig: Any, name: str, caption: str = "", dpi: int = 110) -> Figure:
    """Render a matplotlib figure to a :class:`Figure` (and close it).

    Args:
        fig: a matplotlib ``Figure``; it is closed afterwards.
        name: the :class:`Figure`'s name.
        caption: the caption.
        dpi: the resolution of the PNG, in dots per inch.

    Returns:
        The rendered figure.
    """
    import matplotlib.pyplot as plt  # optional plotting, heavy; privnlp.core sits on every light path

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return Figure(name, buf.getvalue(), caption)


def package_versions(
    names: Sequence[str] = (
        "privnlp",
        "torch",
        "numpy",
        "opacus",
        "dp-accounting",
        "transformers",
        "tokenizers",
        "gensim",
        "flwr",
        "crypten",
    ),
) -> dict[str, str]:
    """Installed versions of ``names`` (``"not installed"`` for a missing one), recorded in every report so
    its numbers can be traced to the library versions that produced them.

    Args:
        names: distribution names to look up.

    Returns:
        Name -> installed version (or ``"not installed"``).
    """

    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = "not installed"
    return out


@dataclass(frozen=True)
class LeakageReport:
    """A defense's privacy claim next to its measured leakage and utility cost.

    Attributes:
        mechanism: the mechanism's registry name.
        claim: its privacy claim.
        threat_models: the threat models the claim is about.
        attacks: one entry per attack run against it.
        utility: utility metric -> summary with the defense.
        utility_undefended: the same without it.
        empirical_epsilon_lower_bound: the largest epsilon lower bound an attack certified, where one did.
        audited_claim: the claim that lower bound audits, in words (an audit runs the mechanism at its
            own setting, whose claim can differ from the headline claim's).
        config: the evaluation's settings.
        seeds: the seeds the scenario ran with.
        versions: package -> version (see :func:`package_versions`).
        figures: rendered plots.
        sweeps: parameter sweeps (leakage / utility curves), JSON-friendly.
        notes: remarks shown on the card.
        created: ISO-8601 UTC timestamp of creation.

    Raises:
        ValueError: (``from_dict``) the dict's ``schema`` is not :data:`SCHEMA_VERSION`.
    """

    mechanism: str
    claim: PrivacyClaim
    threat_models: tuple[ThreatModel, ...]
    attacks: tuple[AttackMetrics, ...]
    utility: Mapping[str, MetricSummary] = field(default_factory=dict)
    utility_undefended: Mapping[str, MetricSummary] = field(default_factory=dict)
    empirical_epsilon_lower_bound: float | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = ()
    versions: Mapping[str, str] = field(default_factory=dict)
    figures: tuple[Figure, ...] = ()
    sweeps: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    created: str = field(
        default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    )
    audited_claim: str | None = None

    def empirical_epsilon_text(self) -> str | None:
        """One line: the empirical lower bound and the claim it bounds (``None`` without one)."""
        if self.empirical_epsilon_lower_bound is None:
            return None
        s = f"{self.empirical_epsilon_lower_bound:.3f}"
        if self.audited_claim:
            s += f", a lower bound on the epsilon of the audited claim {self.audited_claim}"
        return s

    # ---------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "mechanism": self.mechanism,
            "claim": self.claim.to_dict(),
            "threat_models": [t.to_dict() for t in self.threat_models],
            "attacks": [a.to_dict() for a in self.attacks],
            "utility": {k: v.to_dict() for k, v in self.utility.items()},
            "utility_undefended": {k: v.to_dict() for k, v in self.utility_undefended.items()},
            "empirical_epsilon_lower_bound": _jsonable(self.empirical_epsilon_lower_bound),
            "config": _jsonable(dict(self.config)),
            "seeds": list(self.seeds),
            "versions": dict(self.versions),
            "figures": [f.to_dict() for f in self.figures],
            "sweeps": _jsonable(dict(self.sweeps)),
            "notes": list(self.notes),
            "created": self.created,
            "audited_claim": self.audited_claim,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LeakageReport:
        if d.get("schema") != SCHEMA_VERSION:
            raise ValueError(
                f"unsupported report schema {d.get('schema')!r}; expected {SCHEMA_VERSION!r}"
            )
        eps_lb = d.get("empirical_epsilon_lower_bound")
        return cls(
            mechanism=d["mechanism"],
            claim=PrivacyClaim.from_dict(d["claim"]),
            threat_models=tuple(ThreatModel.from_dict(t) for t in d.get("threat_models", [])),
            attacks=tuple(AttackMetrics.from_dict(a) for a in d.get("attacks", [])),
            utility={k: MetricSummary.from_dict(v) for k, v in d.get("utility", {}).items()},
            utility_undefended={
                k: MetricSummary.from_dict(v) for k, v in d.get("utility_undefended", {}).items()
            },
            empirical_epsilon_lower_bound=float(eps_lb) if eps_lb is not None else None,
            config=d.get("config", {}),
            seeds=tuple(d.get("seeds", ())),
            versions=d.get("versions", {}),
            figures=tuple(Figure.from_dict(f) for f in d.get("figures", [])),
            sweeps=d.get("sweeps", {}),
            notes=tuple(d.get("notes", ())),
            created=d.get("created", ""),
            audited_claim=d.get("audited_claim"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    # ---------------------------------------------------------------- rendering
    @property
    def has_twin(self) -> bool:
        return any(a.leaky_twin for a in self.attacks)

    def _attack_header(self) -> list[str]:
        # config["system_label"]: what the measured column is (e.g. "as given" for a user's own model)
        h = ["attack", "metric", "undefended", str(self.config.get("system_label", "defended"))]
        return h + ["leaky twin"] if self.has_twin else h

    def _attack_label(self, a: AttackMetrics) -> str:
        scens = {x.params.get("scenario") for x in self.attacks}
        sc = a.params.get("scenario")
        return f"{a.attack} ({sc})" if len(scens) > 1 and sc else a.attack

    def _attack_rows(self) -> list[list[str]]:
        rows = []
        for a in self.attacks:
            metrics = list(a.defended.keys())
            for m in metrics:
                und = a.undefended.get(m)
                star = " (headline)" if m == a.headline_metric else ""
                row = [
                    self._attack_label(a),
                    m + star,
                    und.fmt() if und else "—",
                    a.defended[m].fmt(),
                ]
                if self.has_twin:
                    tw = a.leaky_twin.get(m)
                    flag = (
                        f" ({TOO_WEAK_FLAG})"
                        if m == a.headline_metric and a.attack_too_weak
                        else ""
                    )
                    row.append((tw.fmt() if tw else "—") + flag)
                rows.append(row)
        return rows

    def headline(self) -> dict[str, dict[str, Any]]:
        """attack -> {"metric", "undefended", "defended", "leaky_twin"} means of the headline metric,
        and ``"attack_too_weak": True`` where the twin does not leak more than the defense."""
        out = {}
        for a in self.attacks:
            m = a.headline_metric
            row = {"metric": m}
            for key, src in (
                ("undefended", a.undefended),
                ("defended", a.defended),
                ("leaky_twin", a.leaky_twin),
            ):
                if m in src:
                    row[key] = src[m].mean
            if a.attack_too_weak:
                row["attack_too_weak"] = True
            out[self._attack_label(a)] = row
        return out

    def _utility_rows(self) -> list[list[str]]:
        rows = []
        for k, v in self.utility.items():
            u = self.utility_undefended.get(k)
            rows.append([k, u.fmt() if u else "—", v.fmt()])
        return rows

    def to_markdown(self, figure_dir: str | os.PathLike | None = None) -> str:
        """Markdown rendering. With ``figure_dir`` the figures are written there as PNG and linked."""
        lines = [
            f"# Leakage report: `{self.mechanism}`",
            "",
            f"**Claim:** {self.claim.headline()}",
            "",
            f"Details: {self.claim.statement()}",
            "",
        ]
        if self.threat_models:
            lines.append("**Threat models:**")
            lines += [f"- {t.describe()}" for t in self.threat_models]
            lines.append("")
        if self.attacks:
            lines += [
                "## Measured leakage",
                "",
                "Higher = more leakage for the headline metric. Mean ± 95% CI half-width over seeds "
                f"(clipped to the metric's range: then [low, high]); (n=k): fewer than {MIN_INTERVAL_N} "
                "values, no interval.",
                "",
                "| " + " | ".join(self._attack_header()) + " |",
                "|" + "---|" * len(self._attack_header()),
            ]
            lines += ["| " + " | ".join(r) + " |" for r in self._attack_rows()]
            lines.append("")
        if self.empirical_epsilon_lower_bound is not None:
            lines += [
                f"**Empirical epsilon lower bound:** {self.empirical_epsilon_text()}",
                "",
            ]
        if self.utility:
            lines += ["## Utility", "", "| metric | undefended | defended |", "|---|---|---|"]
            lines += ["| " + " | ".join(r) + " |" for r in self._utility_rows()]
            lines.append("")
        if self.figures:
            lines += ["## Figures", ""]
            for f in self.figures:
                if figure_dir is not None:
                    p = Path(figure_dir) / f"{self.mechanism}-{f.name}.png"
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(f.png)
                    lines.append(f"![{f.caption or f.name}]({p.name})")
                else:
                    lines.append(f"- {f.name}: {f.caption} (see the HTML report)")
            lines.append("")
        if self.notes:
            lines += ["## Notes", ""] + [f"- {n}" for n in self.notes] + [""]
        lines += [
            "## Reproducibility",
            "",
            f"- seeds: {list(self.seeds)}",
            f"- config: `{json.dumps(_jsonable(dict(self.config)), sort_keys=True)}`",
            "- versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items()),
            f"- created: {self.created}",
            "",
        ]
        return "\n".join(lines)

    def to_html(self) -> str:
        """A self-contained HTML page (no external assets; figures inlined as data URIs)."""
        e = _html.escape

        def table(header: list[str], rows: list[list[str]]) -> str:
            h = "".join(f"<th>{e(c)}</th>" for c in header)
            b = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
            return f"<table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>"

        parts = [
            "<!DOCTYPE html><html><head><meta charset='utf-8'>",
            f"<title>privnlp leakage report: {e(self.mechanism)}</title>",
            "<style>body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222}"
            "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}"
            "th{background:#f3f3f3}.claim{background:#eef6ff;padding:.6em 1em;border-left:4px solid #36c}"
            "img{max-width:100%;border:1px solid #ddd;margin:.5em 0}figcaption{color:#555;font-size:.9em}</style>",
            "</head><body>",
            f"<h1>Leakage report: <code>{e(self.mechanism)}</code></h1>",
            f"<p class='claim'><b>Claim:</b> {e(self.claim.headline())}<br>"
            f"<small>{e(self.claim.statement())}</small></p>",
        ]
        if self.threat_models:
            parts.append(
                "<h2>Threat models</h2><ul>"
                + "".join(f"<li>{e(t.describe())}</li>" for t in self.threat_models)
                + "</ul>"
            )
        if self.attacks:
            parts.append(
                "<h2>Measured leakage</h2><p>Higher = more leakage for the headline metric; mean ± 95% CI half-width.</p>"
            )
            parts.append(table(self._attack_header(), self._attack_rows()))
        if self.empirical_epsilon_lower_bound is not None:
            parts.append(
                f"<p><b>Empirical epsilon lower bound:</b> {e(self.empirical_epsilon_text())}</p>"
            )
        if self.utility:
            parts.append(
                "<h2>Utility</h2>"
                + table(["metric", "undefended", "defended"], self._utility_rows())
            )
        if self.figures:
            parts.append("<h2>Figures</h2>")
            for f in self.figures:
                b64 = base64.b64encode(f.png).decode()
                parts.append(
                    f"<figure><img alt='{e(f.name)}' src='data:image/png;base64,{b64}'>"
                    f"<figcaption>{e(f.caption or f.name)}</figcaption></figure>"
                )
        if self.notes:
            parts.append(
                "<h2>Notes</h2><ul>" + "".join(f"<li>{e(n)}</li>" for n in self.notes) + "</ul>"
            )
        parts.append("<h2>Reproducibility</h2>")
        parts.append(
            f"<p>seeds: {e(str(list(self.seeds)))}</p><pre>{e(json.dumps(_jsonable(dict(self.config)), indent=1, sort_keys=True))}</pre>"
        )
        parts.append(
            "<p>versions: " + e(", ".join(f"{k} {v}" for k, v in self.versions.items())) + "</p>"
        )
        parts.append(f"<p>created: {e(self.created)}</p></body></html>")
        return "".join(parts)

    def save(self, report_dir: str | os.PathLike, name: str | None = None) -> dict[str, Path]:
        """Write ``<name>.json``, ``<name>.md`` and ``<name>.html`` atomically; return their paths."""
        d = Path(report_dir)
        d.mkdir(parents=True, exist_ok=True)
        name = name or self.mechanism
        paths = {"json": d / f"{name}.json", "md": d / f"{name}.md", "html": d / f"{name}.html"}
        atomic_write_text(paths["json"], self.to_json())
        atomic_write_text(paths["md"], self.to_markdown(figure_dir=d))
        atomic_write_text(paths["html"], self.to_html())
        return paths

    @classmethod
    def load(cls, path: str | os.PathLike) -> LeakageReport:
        return cls.from_dict(json.loads(Path(path).read_text()))


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` via a temp file in the same folder + ``os.replace``.

    Readers see the old file or the new one, never a partial file; the parent folder is created.

    Args:
        path: destination file.
        text: the whole content.
        encoding: text encoding.

    Returns:
        ``path`` as a :class:`pathlib.Path`.

    Raises:
        OSError: the folder is not writable (the temp file is removed).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file normal permissions
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
