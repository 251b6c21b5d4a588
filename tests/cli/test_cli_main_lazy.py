"""The root command loads its groups lazily (issue 31: ~0.2 s of every CLI start): `privnlp --help`
lists every command from a static table without importing the groups, a command imports only its own
module, and the table and the lazily built commands cannot drift from the modules."""

from __future__ import annotations

import inspect
import os
import pkgutil
import subprocess
import sys

import typer
from typer.testing import CliRunner

import privnlp.cli
from privnlp.cli.main import COMMANDS, GROUPS, app, load_command

_GROUP_MODULES = [f"privnlp.cli.{g}" for g in (*GROUPS, "redact", "attack_memorization")]


def _first_paragraph(text: str | None) -> str:
    return inspect.cleandoc(text or "").split("\n\n")[0].replace("\n", " ").strip()


def test_the_table_names_every_command_module_with_its_own_help_line():
    """Every module of privnlp/cli that declares a typer app is a group of the table, and each line
    is the first paragraph of the help the module declares (what an eager `--help` printed)."""
    declared = set()
    for m in pkgutil.iter_modules(privnlp.cli.__path__):
        mod = __import__(f"privnlp.cli.{m.name}", fromlist=["app"])
        if isinstance(getattr(mod, "app", None), typer.Typer) and m.name != "main":
            declared.add(m.name)
    assert declared == set(GROUPS)
    assert list(COMMANDS) == ["redact", *GROUPS]
    for name, line in COMMANDS.items():
        cmd = load_command(name)
        assert cmd.name == name
        assert _first_paragraph(cmd.help) == line, name


def _eager_app() -> typer.Typer:
    """The root app as it was built before the groups were lazy (every module imported)."""
    import importlib

    from privnlp.cli import attack_memorization

    eager = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)

    @eager.callback()
    def _root() -> None:
        pass

    for g in GROUPS:
        mod = importlib.import_module(f"privnlp.cli.{g}")
        if g == "attack" and not getattr(mod.app, "_privnlp_memorization", False):
            attack_memorization.register(mod.app)
            mod.app._privnlp_memorization = True
        eager.add_typer(mod.app, name=g)
    eager.command("redact")(importlib.import_module("privnlp.cli.redact").redact)
    return eager


def test_lazy_commands_are_the_eager_ones():
    """Every command's and sub-command's --help is the same text as with eager add_typer (options,
    defaults, sub-commands: the attack group keeps its memorization commands)."""
    r = CliRunner()
    eager = _eager_app()
    for name in COMMANDS:
        lazy_cmd = typer.main.get_command(app).get_command(None, name)
        paths = [[name]] + (
            [[name, s] for s in lazy_cmd.list_commands(None)]
            if hasattr(lazy_cmd, "commands")
            else []
        )
        for p in paths:
            a = r.invoke(app, [*p, "--help"], terminal_width=100)
            b = r.invoke(eager, [*p, "--help"], terminal_width=100)
            assert a.exit_code == 0 and b.exit_code == 0, (p, a.output, b.output)
            assert a.output == b.output, p
    assert {"canary", "eavesdrop", "watermark"} <= set(
        typer.main.get_command(app).get_command(None, "attack").list_commands(None)
    )


def test_typo_is_suggested_and_unknown_command_fails():
    r = CliRunner().invoke(app, ["sanitze"])
    assert r.exit_code == 2
    assert "No such command 'sanitze'" in r.output and "'sanitize'" in r.output


def _run(code: str) -> str:
    env = {**os.environ, "COLUMNS": "200"}  # rich's width: one line per command
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_help_imports_no_group_and_a_command_imports_only_its_own():
    mods = repr(_GROUP_MODULES)
    out = _run(
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from privnlp.cli.main import app\n"
        "res = CliRunner().invoke(app, ['--help'])\n"
        "assert res.exit_code == 0, res.output\n"
        "print(res.output)\n"
        f"print('LOADED', sorted(m for m in {mods} if m in sys.modules))\n"
        "res = CliRunner().invoke(app, ['sanitize', '--help'])\n"
        "assert res.exit_code == 0, res.output\n"
        f"print('LOADED', sorted(m for m in {mods} if m in sys.modules))\n"
    )
    listing, after_help, after_sanitize = out.split("LOADED")
    for name, line in COMMANDS.items():
        assert f"{name} " in listing and line in " ".join(listing.split()), name
    assert after_help.strip() == "[]"
    assert after_sanitize.strip() == "['privnlp.cli.sanitize']"
