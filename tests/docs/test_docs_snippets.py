"""Every Python block of the documentation site runs (issue #21).

One test per page of ``docs/`` that has Python blocks: the page's blocks run in order, in one process and
one shared namespace (tests/docs/snippet_runner.py). Blocks marked ``<!-- docs-test: slow REASON -->``
run only in the slow suite (``make repro``); ``<!-- docs-test: skip REASON -->`` never run (and the
reason is shown by ``pytest -rs``). Blocks that include or repeat ``docs/snippets/*.py`` are the README's
snippets: tests/docs/test_readme.py runs them (once).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "privnlp_docs_snippet_runner", Path(__file__).with_name("snippet_runner.py")
)
runner = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = runner
_spec.loader.exec_module(runner)

EXCLUDED = {
    "DEVELOPING.md"
}  # the contributors' guide, not part of the site (mkdocs.yml exclude_docs)


def doc_pages() -> list[Path]:
    return [
        p
        for p in sorted((ROOT / "docs").rglob("*.md"))
        if p.relative_to(ROOT / "docs").as_posix() not in EXCLUDED
    ]


def _blocks(page: Path):
    return runner.python_blocks(page.read_text(), page.relative_to(ROOT).as_posix())


PAGES = [p for p in doc_pages() if _blocks(p)]
SLOW_PAGES = [p for p in PAGES if any(b.marker == "slow" for b in _blocks(p))]


SNIPPETS = {p.read_text().strip() for p in (ROOT / "docs" / "snippets").glob("*.py")}


def _is_readme_snippet(b) -> bool:
    """A block that is (or includes) one of docs/snippets/*.py: test_readme runs it from README.md."""
    return b.is_include_only or b.code.strip() in SNIPPETS


def _run(page: Path, tmp_path: Path, *, slow: bool) -> None:
    blocks = [
        b
        for b in _blocks(page)
        if not _is_readme_snippet(b) and b.marker != "skip" and (slow or b.marker != "slow")
    ]
    if not blocks:
        pytest.skip(f"{page.name}: every Python block is marked skip/slow or is a README snippet")
    r = runner.run_blocks(blocks, tmp_path)
    assert r.returncode == 0 and "@@done" in r.stdout, runner.failure_message(r)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT / "docs").as_posix())
def test_page_python_blocks_run(page, tmp_path):
    _run(page, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW_PAGES, ids=lambda p: p.relative_to(ROOT / "docs").as_posix())
def test_page_python_blocks_run_including_slow_ones(page, tmp_path):
    _run(page, tmp_path, slow=True)


def test_every_marker_gives_a_reason():
    bad = [
        f"{b.page}:{b.line}" for p in PAGES for b in _blocks(p) if b.marker and len(b.reason) < 8
    ]
    assert not bad, f"docs-test markers without a reason: {bad}"


def test_the_home_page_snippets_are_the_readme_snippets():
    """docs/index.md includes docs/snippets/*.py; the README shows the same code (and test_readme runs it)."""
    readme = (ROOT / "README.md").read_text()
    home = (ROOT / "docs" / "index.md").read_text()
    includes = [b for b in runner.python_blocks(home, "docs/index.md") if b.is_include_only]
    assert len(includes) == 3
    for b in includes:
        assert runner.expand_includes(b.code).strip() in readme
    tour = runner.python_blocks((ROOT / "docs" / "readme" / "10-tour.md").read_text(), "10-tour.md")
    assert [b.code.strip() in SNIPPETS for b in tour] == [True, True, True], (
        "the tour shows the README's snippets"
    )


def test_the_runner_finds_markers_includes_and_failures(tmp_path):
    """The runner itself can fail: a raising block is reported with its page and line."""
    md = (
        "text\n\n<!-- docs-test: skip needs a Flower server -->\n```python\nraise SystemExit(3)\n```\n\n"
        "```python\nx = 1\n```\n\n```py\nassert x == 1\nprint('ok')\n```\n\n```bash\nexit 1\n```\n\n"
        "```python\n1 / 0\n```\n"
    )
    blocks = runner.python_blocks(md, "demo.md")
    assert [b.marker for b in blocks] == ["skip", None, None, None]
    assert blocks[0].reason == "needs a Flower server" and blocks[1].line == 8
    ok = runner.run_blocks(blocks[1:3], tmp_path)
    assert ok.returncode == 0 and runner.outputs_per_block(ok.stdout)["demo.md:12"] == "ok\n"
    bad = runner.run_blocks(blocks[1:], tmp_path)
    assert bad.returncode != 0 and "demo.md:21" in runner.failure_message(bad)
    assert "ZeroDivisionError" in runner.failure_message(bad)
