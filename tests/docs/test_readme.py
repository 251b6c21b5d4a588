"""README.md is the generated front page: short, up to date, its snippets run and its links resolve."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "privnlp_docs_snippet_runner_readme", Path(__file__).with_name("snippet_runner.py")
)
runner = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = runner
_spec.loader.exec_module(runner)

LINK = re.compile(
    r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)|<a [^>]*href=['\"]([^'\"]+)['\"]"
)


def test_readme_is_generated_and_up_to_date():
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_readme.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr


def test_readme_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```")[1]
    assert "make demo" in first_block and "make test" in first_block


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) < 200


def test_readme_snippets_run(tmp_path):
    """The three snippets (one per job) run as written, each on its own, and print something."""
    blocks = runner.python_blocks((ROOT / "README.md").read_text(), "README.md")
    assert len(blocks) == 3
    assert all(len(b.code.strip().splitlines()) <= 15 for b in blocks)
    r = runner.run_blocks(blocks, tmp_path, fresh_namespace=True)
    assert r.returncode == 0 and "@@done" in r.stdout, runner.failure_message(r)
    printed = runner.outputs_per_block(r.stdout)
    assert all(printed[f"README.md:{b.line}"].strip() for b in blocks), printed


def readme_links(text: str) -> list[str]:
    links = []
    for fenced, line in _outside_fences(text.splitlines()):
        if not fenced:
            links += [next(g for g in m.groups() if g) for m in LINK.finditer(line)]
    return links


def _outside_fences(lines):
    inside = False
    for line in lines:
        if line.lstrip().startswith("```"):
            inside = not inside
            yield True, line
            continue
        yield inside, line


def _slug(heading: str) -> str:
    """GitHub's heading anchor."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return s.replace(" ", "-")


def broken_links(text: str, base: Path) -> list[str]:
    bad = []
    for link in readme_links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", link):  # http:, https:, mailto: -- not checked offline
            continue
        path, _, anchor = link.partition("#")
        target = (base / path).resolve() if path else base / "README.md"
        if not target.exists():
            bad.append(f"{link}: {target} does not exist")
            continue
        if anchor and target.suffix == ".md":
            slugs = {
                _slug(ln.lstrip("#"))
                for f, ln in _outside_fences(target.read_text().splitlines())
                if not f and ln.startswith("#")
            }
            if anchor not in slugs:
                bad.append(f"{link}: no heading #{anchor} in {target.name}")
    return bad


def test_every_readme_link_resolves():
    """Relative links point at files of the repository, so they work on GitHub and in a clone."""
    text = (ROOT / "README.md").read_text()
    links = readme_links(text)
    assert len(links) >= 20 and any(link.startswith("docs/") for link in links)
    assert not broken_links(text, ROOT), broken_links(text, ROOT)


def test_the_link_checker_catches_a_broken_link(tmp_path):
    (tmp_path / "a.md").write_text("# Title here\n")
    text = (
        "[ok](a.md) [ok2](a.md#title-here) [bad](b.md) [bad anchor](a.md#nope) ![img](c.png) [web](https://x.org)\n"
        "```\n[in a fence](nowhere.md)\n```\n"
    )
    assert sorted(b.split(":")[0] for b in broken_links(text, tmp_path)) == [
        "a.md#nope",
        "b.md",
        "c.png",
    ]
