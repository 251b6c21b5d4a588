"""Render a report's HTML page in headless Chromium and check it shows the tables and images."""

from __future__ import annotations

import subprocess

from privnlp.core import AttackMetrics, LeakageReport, PrivacyClaim, summarize
from privnlp.evaluation.plots import headline_bar_figure


def test_html_report_renders_tables_and_images_in_chromium(tmp_path, chromium):
    exe = chromium
    rep = LeakageReport(
        mechanism="demo",
        claim=PrivacyClaim.dp(2.0, 1e-5, "record"),
        threat_models=(),
        attacks=(
            AttackMetrics(
                "film",
                "rougeL",
                {"rougeL": summarize([0.2, 0.3])},
                {"rougeL": summarize([0.9, 0.95])},
            ),
        ),
        utility={"perplexity": summarize([40.0, 42.0])},
    )
    from dataclasses import replace

    rep = replace(rep, figures=(headline_bar_figure(rep),))
    page = tmp_path / "demo.html"
    page.write_text(rep.to_html())
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    # 1) the DOM after rendering: tables and an <img> whose image actually decoded (naturalWidth > 0)
    js_page = tmp_path / "probe.html"
    js_page.write_text(
        rep.to_html().replace(
            "</body>",
            "<script>window.onload=()=>{const i=document.querySelector('img');"
            "document.title='IMG:'+i.naturalWidth+'x'+i.naturalHeight+' TABLES:'+document.querySelectorAll('table').length;}"
            "</script></body>",
        )
    )
    dom = subprocess.run(
        [exe, *flags, "--virtual-time-budget=3000", "--dump-dom", js_page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    import re

    m = re.search(r"<title>IMG:(\d+)x(\d+) TABLES:(\d+)</title>", dom.stdout)
    assert m, dom.stdout[:500]
    w, h, tables = map(int, m.groups())
    assert w > 100 and h > 100, "the embedded PNG did not decode"
    assert tables >= 2
    assert "film" in dom.stdout and "0.925" in dom.stdout
    # 2) a screenshot is produced (what a person sees)
    shot = tmp_path / "shot.png"
    r = subprocess.run(
        [exe, *flags, f"--screenshot={shot}", "--window-size=1000,1400", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and shot.exists() and shot.stat().st_size > 10_000


def test_index_overview_heatmap_and_scatter_render_in_chromium(tmp_path, request):
    """Issue #17: the index page's defenses x attacks heatmap and privacy-utility scatter (also PNG + SVG)."""
    from privnlp.evaluation.cards import EvaluationOutcome, write_index

    def rep(name, und, dfd, util):
        return LeakageReport(
            mechanism=name,
            claim=PrivacyClaim.dp(2.0, 1e-5, "record"),
            threat_models=(),
            attacks=(
                AttackMetrics(
                    "film", "rougeL", {"rougeL": summarize([dfd])}, {"rougeL": summarize([und])}
                ),
                AttackMetrics(
                    "rlg",
                    "accuracy",
                    {"accuracy": summarize([dfd / 2])},
                    {"accuracy": summarize([1.0])},
                ),
            ),
            utility={"loss": summarize([util])},
            utility_undefended={"loss": summarize([2.0])},
        )

    outs = [
        EvaluationOutcome(n, rep(n, 0.9, d, u), {}, 1.0)
        for n, d, u in (("dp_sgd", 0.05, 2.6), ("sign_sgd", 0.5, 2.1), ("graddrop", 0.8, 2.0))
    ]
    index = write_index(outs, tmp_path)
    for stem in ("overview-heatmap", "overview-tradeoff"):
        assert (tmp_path / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
        assert b"<svg" in (tmp_path / f"{stem}.svg").read_bytes()[:2000]
    exe = request.getfixturevalue(
        "chromium"
    )  # skips here, after the file checks, where Chromium is missing
    probe = tmp_path / "probe.html"
    probe.write_text(
        index.read_text().replace(
            "</body>",
            "<script>window.onload=()=>{const s=[...document.querySelectorAll('figure img')]"
            ".map(i=>i.naturalWidth+'x'+i.naturalHeight).join(',');document.title='FIGS:'+s;}</script></body>",
        )
    )
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [exe, *flags, "--virtual-time-budget=3000", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    import re

    m = re.search(r"<title>FIGS:([0-9x,]*)</title>", dom.stdout)
    assert m, dom.stdout[:500]
    sizes = [tuple(map(int, s.split("x"))) for s in m.group(1).split(",") if s]
    assert len(sizes) == 2 and all(w > 200 and h > 150 for w, h in sizes), sizes
    assert "dp_sgd" in dom.stdout and "overview-heatmap.svg" in dom.stdout
