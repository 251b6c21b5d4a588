"""The documentation site builds with --strict and its pages render in headless Chromium (issue #21).

The site is built once per session into a temporary folder (``mkdocs build --strict``, ~10 s); the
screenshot checks follow tests/evaluation/test_html_render.py and skip with a message when Chromium is
missing (``.ci/run`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    mkdocs = Path(sys.executable).with_name("mkdocs")
    if not mkdocs.exists():
        pytest.skip(
            "mkdocs is not installed: pip install -e '.[docs]' (the Makefile's venv has it)"
        )
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return out


def test_site_has_every_generated_page(site):
    for name in (
        "index.html",
        "getting-started/index.html",
        "troubleshooting/index.html",
        "reference/index.html",
        "reference/core/index.html",
        "reference/cli/index.html",
        "cards/index.html",
        "attack-cards/index.html",
        "notebooks/a_private_training/index.html",
    ):
        assert (site / name).exists(), name
    for rep in (ROOT / "cards" / "mechanisms").glob("*/report.json"):
        page = site / "cards" / rep.parent.name / "index.html"
        assert page.exists(), page
        # the numbers on the page are the report's (rendered by the card renderer, not copied by hand)
        head = json.loads(rep.read_text())
        assert rep.parent.name in page.read_text()
        assert head["mechanism"] == rep.parent.name
    for card in (ROOT / "cards" / "attacks").glob("*/README.md"):
        assert (site / "attack-cards" / card.parent.name / "index.html").exists()
    for sec in (ROOT / "docs" / "readme").glob("*.md"):
        assert (site / "readme" / sec.stem / "index.html").exists(), sec.name
    ref = (site / "reference" / "mechanisms.training" / "index.html").read_text()
    assert "make_private" in ref and "DPSGD" in ref


def test_the_card_page_shows_the_reports_numbers(site):
    from privnlp.core.report import LeakageReport

    rep = LeakageReport.load(ROOT / "cards" / "mechanisms" / "dp_sgd" / "report.json")
    page = (site / "cards" / "dp_sgd" / "index.html").read_text()
    for row in rep._attack_rows():
        assert (
            row[2] in page and row[3] in page
        )  # undefended / defended cells, formatted by the card renderer


def _probe(page: Path, js: str) -> Path:
    probe = page.with_name("probe.html")
    probe.write_text(
        page.read_text().replace(
            "</body>", f"<script>window.addEventListener('load',()=>{{{js}}});</script></body>"
        )
    )
    return probe


@pytest.mark.parametrize(
    "page,min_tables,min_images",
    [("index.html", 1, 0), ("cards/dp_sgd/index.html", 2, 1)],
    ids=["home", "card"],
)
def test_site_pages_render_in_chromium(site, tmp_path, page, min_tables, min_images, chromium):
    exe = chromium
    flags = [*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    target = site / page
    # 1) the DOM after rendering: the theme's stylesheet applied, tables present, images decoded
    probe = _probe(
        target,
        "const imgs=[...document.querySelectorAll('article img')];"
        "const ok=imgs.filter(i=>i.naturalWidth>100).length;"
        "const nav=getComputedStyle(document.querySelector('.md-header')).position;"
        "document.title='TABLES:'+document.querySelectorAll('article table').length+' IMGS:'+ok+"
        "'/'+imgs.length+' HEADER:'+nav;",
    )
    dom = subprocess.run(
        [exe, *flags, "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    m = re.search(r"<title>TABLES:(\d+) IMGS:(\d+)/(\d+) HEADER:(\w+)</title>", dom.stdout)
    assert m, dom.stdout[:800]
    tables, ok, n_imgs, header = int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4)
    assert tables >= min_tables
    assert ok >= min_images and ok == n_imgs, f"{n_imgs - ok} image(s) did not decode"
    assert header in ("sticky", "fixed"), (
        "the Material stylesheet did not load (header is not sticky)"
    )
    # 2) a screenshot is produced (what a person sees), and it is not a blank page
    shot = tmp_path / "shot.png"
    r = subprocess.run(
        [exe, *flags, f"--screenshot={shot}", "--window-size=1280,1600", target.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0 and shot.exists() and shot.stat().st_size > 50_000, r.stderr[-2000:]
