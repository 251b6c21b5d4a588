"""Assemble README.md from docs/readme/*.md (sections sorted by their numeric prefix).

Each part of privnlp documents itself in its own section file; run
`python scripts/build_readme.py` after editing one. A test checks README.md is up to date.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build() -> str:
    parts = sorted((ROOT / "docs" / "readme").glob("*.md"))
    return "\n\n".join(p.read_text().strip() for p in parts) + "\n"


if __name__ == "__main__":
    text = build()
    if "--check" in sys.argv:
        if (ROOT / "README.md").read_text() != text:
            sys.exit("README.md is stale: run `python scripts/build_readme.py`")
    else:
        (ROOT / "README.md").write_text(text)
