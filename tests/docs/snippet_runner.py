"""Run the Python blocks of a Markdown page (used by tests/docs/test_docs_snippets.py and test_readme.py).

A page is a narrative: its blocks run in order, in one fresh Python process and one shared namespace (a
block may use what an earlier block on the same page defined), in a temporary working directory.

Markers (an HTML comment on the line right above the fence; invisible on GitHub and on the site):

    <!-- docs-test: skip REASON -->   never run (a fragment of the user's own code, a server, a cluster...)
    <!-- docs-test: slow REASON -->   run only by the slow suite (`make repro`, pytest -m slow)

Every marker needs a reason. ``--8<-- "path"`` lines (pymdownx.snippets) are replaced by the file's text.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)[ \t]*(?P<info>[^\n`]*)$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<kind>skip|slow)\b\s*(?P<reason>.*?)\s*-->\s*$")
INCLUDE = re.compile(r"""^\s*--8<--\s+["']?(?P<path>[^"'\s]+)["']?\s*$""")


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # 1-based line of the opening fence
    code: str
    marker: str | None  # None, "skip" or "slow"
    reason: str = ""

    @property
    def is_include_only(self) -> bool:
        return all(INCLUDE.match(ln) for ln in self.code.strip().splitlines()) and bool(
            self.code.strip()
        )


def python_blocks(markdown: str, page: str = "") -> list[Block]:
    """Every fenced block whose info string starts with ``python`` / ``py`` / ``pycon``-free Python."""
    lines = markdown.splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, indent = (
            m.group("fence"),
            m.group("info").strip().split(),
            len(m.group("indent")),
        )
        j = i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(fence) and lines[j].strip().strip(fence[0]) == ""
        ):
            j += 1
        lang = info[0].lower() if info else ""
        if lang in ("python", "py", "python3"):
            body = (
                "\n".join(
                    ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[i + 1 : j]
                )
                + "\n"
            )
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            mk = MARKER.match(lines[k]) if k >= 0 else None
            out.append(
                Block(
                    page,
                    i + 1,
                    body,
                    mk.group("kind") if mk else None,
                    mk.group("reason") if mk else "",
                )
            )
        i = j + 1
    return out


def expand_includes(code: str, base: Path = ROOT) -> str:
    def one(line: str) -> str:
        m = INCLUDE.match(line)
        return (base / m.group("path")).read_text().rstrip("\n") if m else line

    return "\n".join(one(ln) for ln in code.splitlines()) + "\n"


DRIVER = r"""
import json, sys, traceback, io, contextlib
try:
    import torch
    torch.set_num_threads(1)
except ImportError:
    pass
blocks = json.loads(sys.stdin.read())
ns = {"__name__": "__main__"}
for b in blocks:
    print(f"@@block {b['page']}:{b['line']}", flush=True)
    if b.get("fresh"):
        ns = {"__name__": "__main__"}
    try:
        exec(compile(b["code"], f"{b['page']}:{b['line']}", "exec"), ns)
    except BaseException:
        print(f"@@failed {b['page']}:{b['line']}", flush=True)
        traceback.print_exc()
        sys.exit(1)
    sys.stdout.flush()
print("@@done", flush=True)
"""


def run_blocks(
    blocks: list[Block],
    cwd: Path,
    *,
    fresh_namespace: bool = False,
    timeout: int = 1200,
) -> subprocess.CompletedProcess:
    """Run ``blocks`` in order in one new Python process (shared namespace unless ``fresh_namespace``)."""
    payload = [
        {"page": b.page, "line": b.line, "code": expand_includes(b.code), "fresh": fresh_namespace}
        for b in blocks
    ]
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        MPLBACKEND="Agg",
        FLWR_TELEMETRY_ENABLED="0",
    )
    return subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps(payload),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def outputs_per_block(stdout: str) -> dict[str, str]:
    """'page:line' -> what that block printed."""
    out, cur = {}, None
    for line in stdout.splitlines():
        if line.startswith("@@block "):
            cur = line[len("@@block ") :]
            out[cur] = ""
        elif line.startswith("@@"):
            continue
        elif cur is not None:
            out[cur] += line + "\n"
    return out


def failure_message(r: subprocess.CompletedProcess) -> str:
    failed = re.search(r"^@@failed (.+)$", r.stdout, flags=re.M)
    where = failed.group(1) if failed else "(before the first block)"
    return f"docs block {where} failed (exit {r.returncode}):\n{r.stderr[-4000:]}"
