import json

import numpy as np
import pytest

from privnlp.core import AttackMetrics, LeakageReport, PrivacyClaim, summarize
from privnlp.core.report import Figure, atomic_write_text


def _report():
    return LeakageReport(
        mechanism="m",
        claim=PrivacyClaim.dp(1.0, 1e-5, "record"),
        threat_models=(),
        attacks=(
            AttackMetrics(
                "a",
                "acc",
                {"acc": summarize([0.5, 0.6, 0.7])},
                {"acc": summarize([0.9, 0.95, 1.0])},
                leaky_twin={"acc": summarize([1.0, 1.0])},
            ),
        ),
        utility={"loss": summarize([1.0, 2.0])},
        seeds=(0, 1, 2),
        figures=(Figure("f", b"\x89PNG fake", "cap"),),
    )


def test_summarize_t_interval_hand_computed():
    s = summarize([1.0, 2.0, 3.0])
    # mean 2, sd 1, sem 1/sqrt(3), t_{0.975,2} = 4.302653
    assert s.mean == pytest.approx(2.0)
    assert s.ci_high - s.mean == pytest.approx(4.302653 / np.sqrt(3), rel=1e-5)
    assert summarize([5.0]).ci_low == 5.0
    assert np.isnan(summarize([]).mean)


def test_report_roundtrip_and_renderings(tmp_path):
    r = _report()
    d = r.to_dict()
    assert d["schema"] == "privnlp.report/1"
    r2 = LeakageReport.from_dict(json.loads(json.dumps(d)))
    assert r2.attacks[0].defended["acc"].mean == pytest.approx(0.6)
    h = r2.headline()["a"]
    assert h["metric"] == "acc"
    assert (h["undefended"], h["defended"], h["leaky_twin"]) == pytest.approx((0.95, 0.6, 1.0))
    md = r.to_markdown()
    assert "| a | acc (headline) | 0.950 ± " in md and "leaky twin" in md
    html = r.to_html()
    assert (
        "<table>" in html
        and "data:image/png;base64," in html
        and "http" not in html.split("<body>")[1]
    )
    paths = r.save(tmp_path)
    assert all(p.exists() for p in paths.values())


def test_atomic_write_leaves_no_partial_file(tmp_path):
    target = tmp_path / "out.txt"

    with pytest.raises(Exception):
        atomic_write_text(target, None)  # type: ignore[arg-type]
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []
