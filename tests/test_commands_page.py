"""docs/commands.md names every command and every option each one takes, so the page cannot drift from the code.

The options are read from each command's own argparse parser (its ``parse_args`` is intercepted before it runs),
never from ``--help`` text.
"""

from __future__ import annotations

import argparse
import importlib

import pytest

from analysis.cli import COMMANDS, policy
from repro.core.paths import ROOT

PAGE = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")


class _Seen(Exception):
    pass


def _options(name: str, monkeypatch) -> set[str]:
    seen: set[str] = set()

    def capture(parser, args=None, namespace=None):
        seen.update(o for action in parser._actions for o in action.option_strings
                    if o.startswith("--") and action.help != argparse.SUPPRESS)  # a hidden option is not promised
        raise _Seen

    monkeypatch.setattr(policy.Parser, "parse_args", capture)
    body = importlib.import_module(COMMANDS[name][0]).main.__wrapped__
    with pytest.raises(_Seen):
        body([])
    return seen - {"--help", "--debug"}  # every command's, said once on the page


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_commands_page_names_the_command_and_each_option(name, monkeypatch):
    assert f"python -m analysis {name}" in PAGE
    missing = sorted(o for o in _options(name, monkeypatch) if f"`{o}" not in PAGE and f" {o}" not in PAGE
                     and f"[{o}" not in PAGE)
    assert not missing, f"docs/commands.md does not name {name}'s {', '.join(missing)}"


def _all_options(name: str, monkeypatch) -> set[str]:
    seen: set[str] = set()

    def capture(parser, args=None, namespace=None):
        seen.update(o for action in parser._actions for o in action.option_strings)
        raise _Seen

    monkeypatch.setattr(policy.Parser, "parse_args", capture)
    with pytest.raises(_Seen):
        importlib.import_module(COMMANDS[name][0]).main.__wrapped__([])
    return seen


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_takes_debug(name, monkeypatch):
    """The page says once that every command takes --debug; hold each command to it."""
    assert "--debug" in _all_options(name, monkeypatch)


def test_a_new_command_entry_alone_is_dispatched_under_the_policy(tmp_path, monkeypatch, capsys):
    """One module and one COMMANDS entry, nothing else: listed, run, and held to the error policy."""
    (tmp_path / "made_up_command.py").write_text(
        "from analysis.cli import policy\n"
        "from repro.core.errors import SuiteError\n\n"
        "@policy.command('made-up')\n"
        "def main(argv=None):\n"
        "    parser = policy.Parser('made-up', description='a made-up command')\n"
        "    parser.add_argument('--n', type=int, default=1)\n"
        "    args = parser.parse_args(argv)\n"
        "    if args.n < 0:\n"
        "        raise SuiteError('--n must be at least 0')\n"
        "    print('ran', args.n)\n"
        "    return 0\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(COMMANDS, "made-up", ("made_up_command", "a made-up command"))
    assert policy.dispatch(["--help"]) == 0
    assert "made-up" in capsys.readouterr().out
    assert policy.dispatch(["made-up", "--n", "3"]) == 0
    assert capsys.readouterr().out == "ran 3\n"
    for argv, says in ((["made-up", "--n", "-1"], "made-up: error: --n must be at least 0"),
                       (["made-up", "--nope"], "made-up: error: unrecognized arguments: --nope")):
        assert policy.dispatch(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(says), err
