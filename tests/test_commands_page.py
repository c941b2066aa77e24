"""docs/commands.md names every command and every option each one takes, so the page cannot drift from the code.

The options are read from each command's own argparse parser (its ``parse_args`` is intercepted before it runs),
never from ``--help`` text.
"""

from __future__ import annotations

import argparse
import importlib
import re

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


def _console(after: str) -> list[str]:
    """The lines of the page's console block that runs ``$ after``, up to its closing fence."""
    lines = PAGE.splitlines()
    start = lines.index(f"$ {after}") + 1
    return lines[start:lines.index("```", start)]


def _rows(lines: list[str]) -> dict[str, str]:
    """A gate table's verdict by property (rows the page elides with … left out)."""
    return {line.split()[0]: line.split()[-1] for line in lines if line.endswith(("PASS", "FAIL"))
            and not line.startswith(("PASS:", "FAIL:"))}


def test_the_pi_controller_end_to_end_is_what_the_gate_says(tmp_path, capsys):
    """The page's stateful rule of one's own (docs/examples/log_pi.*, its model named by its contract): the pasted
    runs are the gate's, row by row, for the example and for its gain one float32 ulp off (the page's sed)."""
    import shlex

    from analysis.cli import gate

    example = "python -m analysis gate docs/examples/log_pi.cu --contracts docs/examples/log_pi.toml"
    pasted = _console(example)
    assert gate.main([*shlex.split(example)[4:], "--backend", "host"]) == 0
    ran = capsys.readouterr().out.splitlines()
    assert _rows(pasted) == _rows(ran) and pasted[1] == ran[1], (pasted, ran)  # every row, and the contract line
    sed = next(line for line in PAGE.splitlines() if line.startswith("$ sed ") and "docs/examples/log_pi.cu" in line)
    old, new = re.fullmatch(r"\$ sed 's/(.*)/(.*)/' docs/examples/log_pi.cu > \S+", sed).groups()
    kernel_text = (ROOT / "docs" / "examples" / "log_pi.cu").read_text(encoding="utf-8")
    assert kernel_text.count(old) == 1
    bug = tmp_path / "pi_bug.cu"
    bug.write_text(kernel_text.replace(old, new), encoding="utf-8")
    pasted = _console("python -m analysis gate /tmp/pi_bug.cu --contracts docs/examples/log_pi.toml")
    assert gate.main([str(bug), "--contracts", "docs/examples/log_pi.toml", "--backend", "host"]) == 1
    ran = capsys.readouterr().out.splitlines()
    shown_rows = _rows(pasted)
    assert shown_rows == {k: v for k, v in _rows(ran).items() if k in shown_rows} and "FAIL" in shown_rows.values()
    assert {k for k, v in _rows(ran).items() if v == "FAIL"} == {k for k, v in shown_rows.items() if v == "FAIL"}
    first = next(line for line in pasted if "first shows" in line)
    assert first in ran and re.sub(r" in [\d.]+ s$", "", pasted[-1]) == re.sub(r" in [\d.]+ s$", "", ran[-1])


def test_the_commands_page_shows_every_figure_the_report_writes():
    """The page's "The report" section links each figure of the report's registry (``summary.captions()``: what
    ``report`` draws and tests/test_report.py checks it writes), and no other figure of the report's folder;
    ``reports/bench/`` is the benchmark's own figure, which the summary links."""
    from analysis.present import summary  # lazily: the page's other tests need no plotting imports

    section = PAGE.split("\n## The report\n", 1)[1].split("\n## ", 1)[0]
    shown = set(re.findall(r"\(\.\./reports/([^/)]+\.png)\)", section))
    written = set(summary.captions())
    assert shown == written, (f"missing from docs/commands.md: {sorted(written - shown)}; "
                              f"not written by the report: {sorted(shown - written)}")
