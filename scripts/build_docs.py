"""Generate the documentation site's pages from the code and the reports (issue #21).

This file is both

* the MkDocs hook named in ``mkdocs.yml`` (``hooks:``): ``mkdocs build`` / ``mkdocs serve`` call
  :func:`on_config`, :func:`on_files` and :func:`on_page_markdown`, so ``make docs`` always renders the
  *current* reports, cards and docstrings; nothing generated is committed or copied by hand;
* a script: ``python scripts/build_docs.py --out DIR`` writes the generated pages to ``DIR`` to look at.

What it generates (virtual files, never written into ``docs/``):

* ``cards/<defense>.md`` - the leakage card of every defense, rendered from ``cards/mechanisms/<name>/report.json``
  by :func:`privnlp.evaluation.cards.card_text` (the renderer of ``cards/mechanisms/<name>/README.md``), plus its
  figures; ``cards/index.md`` - the headline table (defenses x measured leakage);
* ``attack-cards/<attack>.md`` - every attack card (``cards/attacks/<name>/README.md``, whose tables the
  reproductions generate from ``results.json``) followed by ``expected.json`` / ``results.json`` rendered as
  tables;
* ``notebooks/*.ipynb`` - the tutorial notebooks (rendered by mkdocs-jupyter, not executed: the
  test suite executes them);
* ``reference/<subpackage>.md`` - the API reference: one mkdocstrings directive per name in each
  subpackage's ``__all__``; ``reference/cli.md`` - ``privnlp --help`` of every command;
* ``troubleshooting.md`` - the cross-cutting list (``docs/readme/95-troubleshooting.md``) plus the
  ``### Troubleshooting`` list of every how-to page.

The how-to guides are the section files ``docs/readme/NN-*.md`` themselves (each part's developers keep
them up to date); the hook lists them in the navigation in file order and lifts their headings one level
(a section starts with ``##`` because the same files used to be concatenated into README.md).
"""

from __future__ import annotations

import html
import importlib
import inspect
import json
import math
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SECTIONS = DOCS / "readme"

#: docs/readme sections that are not how-to guides (used by other pages or by README.md)
NOT_HOWTO = {
    "00-header.md": "README.md / getting-started",
    "10-tour.md": "Getting started",
    "95-troubleshooting.md": "Troubleshooting",
    "97-limitations.md": "Known limitations",
    "98-development.md": "Development",
}

#: subpackages documented in the API reference, in layer order (see tests/docs/test_layering.py)
REFERENCE = [
    "core",
    "accounting",
    "data",
    "models",
    "metrics",
    "mechanisms",
    "mechanisms.training",
    "mechanisms.federated",
    "mechanisms.text",
    "mechanisms.vocab",
    "mechanisms.fragmentation",
    "mechanisms.mpc",
    "mechanisms.pii",
    "mechanisms.testing",
    "attacks",
    "attacks.gradient",
    "attacks.memorization",
    "attacks.text",
    "attacks.mpc",
    "attacks.pii",
    "auditing",
    "evaluation",
    "evaluation.scenarios",
]

TUTORIALS = {
    "a_private_training": "Train privately and read ε",
    "b_sanitize_with_vickrey": "Sanitize a dataset",
    "c_evaluate_a_defense": "Evaluate a defense",
    "d_redact_pii_from_your_records": "Redact PII from your records",
}

FENCE = re.compile(r"^(\s*)(```|~~~)")


# ------------------------------------------------------------------------------------------ how-to pages


def _outside_fences(lines: Iterable[str]) -> Iterable[tuple[bool, str]]:
    """(inside a code fence?, line) for every line of a Markdown text."""
    fence = None
    for line in lines:
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(2)
                yield True, line
                continue
            if m.group(2) == fence:
                fence = None
                yield True, line
                continue
        yield fence is not None, line


def section_title(path: Path) -> str:
    """The first heading of a section file, without ``#`` marks and without a trailing parenthesis."""
    for fenced, line in _outside_fences(path.read_text().splitlines()):
        if not fenced and line.startswith("#"):
            title = line.lstrip("#").strip()
            return re.sub(r"\s*\((?!`)[^)]*\)\s*$", "", title) or title
    return path.stem


def howto_sections() -> list[Path]:
    """docs/readme section files that are how-to guides, in file (numeric prefix) order."""
    return [p for p in sorted(SECTIONS.glob("*.md")) if p.name not in NOT_HOWTO]


def lift_headings(markdown: str) -> str:
    """``## X`` -> ``# X``, ``### X`` -> ``## X``, ... outside code fences (a section starts at ``##``)."""
    out = []
    for fenced, line in _outside_fences(markdown.splitlines()):
        if not fenced and re.match(r"^#{2,6} ", line):
            line = line[1:]
        out.append(line)
    return "\n".join(out) + "\n"


def troubleshooting_lists(path: Path) -> str:
    """The body of the ``### Troubleshooting`` subsection of a section file ('' when it has none)."""
    lines = path.read_text().splitlines()
    body, inside = [], False
    for fenced, line in _outside_fences(lines):
        if not fenced and re.match(r"^#{1,6} ", line):
            if inside:
                break
            inside = bool(re.match(r"^#{2,4} Troubleshooting\b", line))
            continue
        if inside:
            body.append(line)
    return "\n".join(body).strip()


def troubleshooting_page() -> str:
    parts = [
        "# Troubleshooting",
        "",
        "The traps that bite across parts first, then each how-to guide's own list (the same text as on "
        "the guide's page; each part's developers keep it next to the code they describe).",
        "",
    ]
    common = SECTIONS / "95-troubleshooting.md"
    if common.exists():
        parts += [
            lift_headings(common.read_text()).replace(
                "# Troubleshooting (the stack)", "## Across the stack", 1
            ),
            "",
        ]
    for p in howto_sections():
        body = troubleshooting_lists(p)
        if body:
            parts += [
                f"## {section_title(p)}",
                "",
                f"From [the how-to guide](readme/{p.name}).",
                "",
                body,
                "",
            ]
    return "\n".join(parts)


# ------------------------------------------------------------------------------------- headline table


def short_claim(claim: Any) -> str:
    """A one-cell summary of a PrivacyClaim (the card states it in full)."""
    from privnlp.cli._summary import short_claim as one_line

    return one_line(claim, long=True)


def _num(v: Any) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2f}"


def headline_rows(
    mechanisms_dir: Path = ROOT / "cards" / "mechanisms",
) -> list[tuple[str, str, str]]:
    """(defense, claim, leakage cell) per defense with a ``report.json``, read from the reports only."""
    from privnlp.core.report import LeakageReport

    rows = []
    for rep_path in sorted(Path(mechanisms_dir).glob("*/report.json")):
        rep = LeakageReport.load(rep_path)
        cells = []
        for atk, v in rep.headline().items():
            twin = (
                f" (twin {_num(v['leaky_twin'])}"
                f"{', attack too weak here' if v.get('attack_too_weak') else ''})"
                if "leaky_twin" in v
                else ""
            )
            cells.append(
                f"{atk.split(' (')[0]} {v['metric']}: {_num(v.get('undefended'))} → "
                f"**{_num(v.get('defended'))}**{twin}"
            )
        rows.append(
            (rep_path.parent.name, short_claim(rep.claim), "<br>".join(cells) or "not measured yet")
        )
    return rows


def headline_table(
    link: str = "cards/{name}.md", mechanisms_dir: Path = ROOT / "cards" / "mechanisms"
) -> str:
    """Markdown table: every defense, its claim, and each paired attack's headline metric undefended →
    defended (leaky twin), from ``cards/mechanisms/*/report.json``. ``link`` formats the defense's link."""
    lines = [
        "| defense | claim | attack metric: undefended → **defended** (leaky twin) |",
        "|---|---|---|",
    ]
    for name, claim, cell in headline_rows(mechanisms_dir):
        lines.append(f"| [`{name}`]({link.format(name=name)}) | {claim} | {cell} |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ cards


def card_pages() -> dict[str, str | Path]:
    """``cards/<name>.md`` (rendered by the cards' own renderer) and their figures."""
    from privnlp.core.registry import MECHANISMS
    from privnlp.core.report import LeakageReport
    from privnlp.evaluation.cards import card_text

    out: dict[str, str | Path] = {}
    registered = set(MECHANISMS.names())
    for rep_path in sorted((ROOT / "cards" / "mechanisms").glob("*/report.json")):
        name = rep_path.parent.name
        if name not in registered:
            continue
        text = card_text(name, LeakageReport.load(rep_path), rep_path.parent)
        out[f"cards/{name}.md"] = text + (
            f"\n*Source: `cards/mechanisms/{name}/report.json` rendered by "
            "`privnlp.evaluation.cards.card_text`, the renderer of the card "
            f"`cards/mechanisms/{name}/README.md`.*\n"
        )
        for png in sorted(rep_path.parent.glob("*.png")):
            out[f"cards/{png.name}"] = png
    out["cards/index.md"] = "\n".join(
        [
            "# Leakage cards",
            "",
            "Every bundled defense with its claim and its *measured* leakage: the headline metric of each paired "
            "attack on the undefended system, on the defense, and on the defense's deliberately leaky twin "
            "(higher = more leakage). Generated from `cards/mechanisms/*/report.json` (quick preset; `make demo` / "
            "`privnlp evaluate --all --cards` regenerates them). Open a defense for its threat models, confidence "
            "intervals, utility cost and figures.",
            "",
            headline_table("{name}.md"),
            "",
        ]
    )
    return out


def _json_table(obj: Any) -> str | None:
    """A Markdown table for a list of flat dicts or a dict of scalars, else None."""

    def flat(v: Any) -> bool:
        return isinstance(v, (int, float, str, bool)) or v is None

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return html.escape(str(v)).replace("|", "\\|")

    if isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj):
        keys = [k for k in obj[0] if all(flat(r.get(k)) for r in obj)]
        if keys:
            lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
            lines += ["| " + " | ".join(fmt(r.get(k)) for k in keys) + " |" for r in obj]
            return "\n".join(lines)
    if isinstance(obj, dict) and obj and all(flat(v) for v in obj.values()):
        return "\n".join(
            ["| key | value |", "|---|---|"] + [f"| {fmt(k)} | {fmt(v)} |" for k, v in obj.items()]
        )
    return None


def render_json(obj: Any, depth: int = 3) -> str:
    """Render a results/expected JSON document as headed tables (nested dicts recurse)."""
    t = _json_table(obj)
    if t is not None:
        return t
    if isinstance(obj, dict):
        parts, scalars = (
            [],
            {k: v for k, v in obj.items() if isinstance(v, (int, float, str, bool)) or v is None},
        )
        if scalars:
            parts.append(_json_table(scalars) or "")
        for k, v in obj.items():
            if k in scalars:
                continue
            parts += [f"{'#' * min(depth, 6)} `{k}`", "", render_json(v, depth + 1)]
        return "\n\n".join(parts)
    if isinstance(obj, list) and all(isinstance(v, (int, float, str, bool)) for v in obj):
        return ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in obj)
    return "```json\n" + json.dumps(obj, indent=1, sort_keys=True)[:4000] + "\n```"


def attack_pages() -> dict[str, str]:
    out: dict[str, str] = {}
    rows = []
    for card in sorted((ROOT / "cards" / "attacks").glob("*/README.md")):
        name = card.parent.name
        text = card.read_text().rstrip() + "\n"
        first = next((ln for ln in text.splitlines() if ln.startswith("# ")), f"# {name}")
        rows.append(f"| [`{name}`]({name}.md) | {first[2:].split('—', 1)[-1].strip()} |")
        for fname, title in (
            ("expected.json", "Expected behaviour (`expected.json`)"),
            ("results.json", "Reproduction results (`results.json`)"),
        ):
            f = card.parent / fname
            if f.exists():
                text += f"\n## {title}\n\n" + render_json(json.loads(f.read_text())) + "\n"
        out[f"attack-cards/{name}.md"] = text + (
            f"\n*Source: `cards/attacks/{name}/` (card, `expected.json`, `results.json`).*\n"
        )
    out["attack-cards/index.md"] = "\n".join(
        [
            "# Attack cards",
            "",
            "The attacks from the literature, built in as evaluators: paper, threat model, what the paper reports, "
            "and our reproduction on the bundled setup. The reproductions (`make repro`) write `results.json`; the "
            "tables on each page are generated from it.",
            "",
            "| attack | what it is |",
            "|---|---|",
            *rows,
            "",
        ]
    )
    return out


# ------------------------------------------------------------------------------------------ API reference


def _api_entries(modname: str) -> list[tuple[str, str]]:
    """(public name, identifier for mkdocstrings) for every name in ``modname.__all__``."""
    mod = importlib.import_module(modname)
    names = getattr(mod, "__all__", None)
    if names is None:
        raise SystemExit(
            f"{modname} has no __all__: the API reference lists exactly the names in __all__"
        )
    out = []
    for name in names:
        obj = getattr(mod, name)
        if inspect.ismodule(obj):
            out.append((name, obj.__name__))
            continue
        owner, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
        if (
            isinstance(owner, str)
            and owner.startswith("privnlp")
            and isinstance(qual, str)
            and "<" not in qual
            and (inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isroutine(obj))
        ):
            out.append((name, f"{owner}.{qual}"))
        else:
            out.append((name, f"{modname}.{name}"))
    return out


def reference_page(sub: str) -> str:
    modname = f"privnlp.{sub}"
    lines = [
        f"# `{modname}`",
        "",
        f"::: {modname}",
        "    options:",
        "      members: false",
        "      show_root_heading: false",
        "",
    ]
    entries = _api_entries(modname)
    if not entries:
        lines += ["This package exports no names of its own (see its subpackages)."]
    for name, ident in entries:
        owner_pkg = ".".join(ident.split(".")[:2])
        obj = getattr(importlib.import_module(modname), name, None)
        if inspect.isclass(obj) and not ident.startswith(modname + ".") and owner_pkg != modname:
            # a class re-exported from another subpackage is documented once, where it lives (its members
            # would otherwise get two primary URLs: mkdocs_autorefs warns, and --strict fails)
            lines += [
                f"## {name}",
                "",
                f"Re-exported from `{ident.rsplit('.', 1)[0]}`: `{ident}`.",
                "",
            ]
            continue
        lines += [
            f"::: {ident}",
            "    options:",
            "      show_root_heading: true",
            f'      heading: "{name}"',
            "      heading_level: 2",
            "",
        ]
    return "\n".join(lines)


def cli_page() -> str:
    """``privnlp --help`` and every subcommand's help, generated from the typer app."""
    import click
    import typer

    from privnlp.cli.main import app

    root = typer.main.get_command(app)
    lines = [
        "# The `privnlp` command",
        "",
        "Generated from the command's own `--help` (`privnlp COMMAND --help` prints the same).",
        "",
    ]

    def walk(cmd: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(
            cmd, info_name=" ".join(path), parent=None, terminal_width=100, max_content_width=100
        )
        with ctx:
            formatter = ctx.make_formatter()
            click.Command.format_help(cmd, ctx, formatter)
            text = formatter.getvalue()
        lines.extend(
            [
                f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`",
                "",
                "```text",
                text.rstrip(),
                "```",
                "",
            ]
        )
        if isinstance(cmd, click.Group):
            for sub in sorted(cmd.list_commands(ctx)):
                c = cmd.get_command(ctx, sub)
                if c is not None and not getattr(c, "hidden", False):
                    walk(c, path + [sub], ctx)

    walk(root, ["privnlp"], None)
    return "\n".join(lines)


def reference_pages() -> dict[str, str]:
    out = {f"reference/{sub}.md": reference_page(sub) for sub in REFERENCE}
    out["reference/cli.md"] = cli_page()
    rows = [f"| [`privnlp.{s}`]({s}.md) | {_first_line(f'privnlp.{s}')} |" for s in REFERENCE]
    out["reference/index.md"] = "\n".join(
        [
            "# API reference",
            "",
            "Generated from the docstrings: exactly the names each subpackage lists in its `__all__`. The layers "
            "point down (a test enforces it): `core` ← `accounting` / `data` / `models` / `metrics` ← `mechanisms` / "
            "`attacks` ← `auditing` ← `evaluation` ← `cli`.",
            "",
            "| package | |",
            "|---|---|",
            *rows,
            "| [`privnlp` (command line)](cli.md) | the `privnlp` command |",
            "",
        ]
    )
    return out


def _first_line(modname: str) -> str:
    doc = inspect.getdoc(importlib.import_module(modname)) or ""
    return doc.split("\n\n")[0].replace("\n", " ").replace("|", "\\|")


# --------------------------------------------------------------------------------------- all generated


def generated_pages() -> dict[str, str | Path]:
    """uri -> Markdown text (or the Path of a binary/notebook file) of every generated page."""
    out: dict[str, str | Path] = {}
    out.update(card_pages())
    out.update(attack_pages())
    out.update(reference_pages())
    out["troubleshooting.md"] = troubleshooting_page()
    for stem in TUTORIALS:
        nb = ROOT / "notebooks" / f"{stem}.ipynb"
        if nb.exists():
            out[f"notebooks/{stem}.ipynb"] = nb
    return out


# ------------------------------------------------------------------------------------------- MkDocs hook

_PAGES: dict[str, str | Path] = {}


def on_config(config: Any) -> Any:
    """Fill the navigation's generated parts (how-to guides, cards, attack cards, reference)."""
    _PAGES.clear()
    _PAGES.update(generated_pages())
    dynamic = {
        "How-to guides": [{section_title(p): f"readme/{p.name}"} for p in howto_sections()],
        "Leakage cards": [{"Overview": "cards/index.md"}]
        + [
            {k.split("/")[1][:-3]: k}
            for k in sorted(_PAGES)
            if k.startswith("cards/") and k.endswith(".md") and k != "cards/index.md"
        ],
        "Attack cards": [{"Overview": "attack-cards/index.md"}]
        + [
            {k.split("/")[1][:-3]: k}
            for k in sorted(_PAGES)
            if k.startswith("attack-cards/") and k != "attack-cards/index.md"
        ],
        "API reference": [{"Overview": "reference/index.md"}]
        + [{f"privnlp.{s}": f"reference/{s}.md"} for s in REFERENCE]
        + [{"privnlp (CLI)": "reference/cli.md"}],
    }
    for entry in config["nav"] or []:
        if isinstance(entry, dict):
            for key in entry:
                if key in dynamic:
                    entry[key] = dynamic[key]
    return config


try:  # run before mkdocs-jupyter's on_files, so the notebooks added here are rendered as notebooks
    from mkdocs.plugins import event_priority
except ImportError:  # pragma: no cover - script use without mkdocs

    def event_priority(_p: int):  # type: ignore[no-redef]
        return lambda f: f


@event_priority(100)
def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, content in _PAGES.items():
        if uri.startswith(
            "notebooks/"
        ):  # a real file at the same path in the repository (mkdocs-jupyter reads it)
            f = File(
                uri,
                src_dir=str(ROOT),
                dest_dir=config.site_dir,
                use_directory_urls=config.use_directory_urls,
            )
        elif isinstance(content, Path):
            f = File.generated(config, uri, abs_src_path=str(content))
        else:
            f = File.generated(config, uri, content=content)
        files.append(f)
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = page.file.src_uri
    if src.startswith("readme/"):
        markdown = lift_headings(markdown)
    if "<!-- headline-table -->" in markdown:
        markdown = markdown.replace("<!-- headline-table -->", headline_table("cards/{name}.md"))
    return markdown


# ------------------------------------------------------------------------------- griffe: RST -> Markdown

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|exc|obj|const):`~?([^`]+)`")


def rst_to_markdown(doc: str) -> str:
    """The docstrings use a few reST constructs; render them as Markdown code (``:func:`x``` -> `x`)."""
    doc = _ROLE.sub(lambda m: f"`{m.group(1).lstrip('.')}`", doc)
    doc = re.sub(r"(?m)(\S)::$", r"\1:", doc)  # "Usage::" (a literal block follows, indented)
    doc = re.sub(r"(?m)^::$", "", doc)
    return doc


try:
    import griffe as _griffe

    class RSTRoles(_griffe.Extension):
        """Griffe extension (``extensions: [scripts/build_docs.py:RSTRoles]`` in mkdocs.yml)."""

        def on_instance(self, *, obj: Any, **kwargs: Any) -> None:  # noqa: D102
            if obj.docstring is not None:
                obj.docstring.value = rst_to_markdown(obj.docstring.value)
except ImportError:  # pragma: no cover
    pass


# ------------------------------------------------------------------------------------------------ script


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out", type=Path, required=True, help="folder to write the generated pages into"
    )
    args = ap.parse_args(argv)
    for uri, content in generated_pages().items():
        dest = args.out / uri
        dest.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            dest.write_bytes(content.read_bytes())
        else:
            dest.write_text(content)
    print(f"wrote {len(generated_pages())} generated pages under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
