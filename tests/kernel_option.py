"""``--kernel PATH`` and ``--contract NAME``: registered before pytest reads its command line.

pytest reads a bare path after an option it does not know yet as a test path, so
``python -m pytest --kernel /tmp/k.cu`` would root the run at /tmp and never load
this repository's conftest. ``rlq_pytest_plugin.dist-info`` (at the repository root,
which ``python -m pytest`` puts on ``sys.path``) registers this module as a plugin,
so the options exist from the first parse; when that first parse has already
missed the repository's configuration, it is loaded here from the invocation folder.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("rlq", "λ-controller suite")
    group.addoption("--kernel", type=Path, help="candidate kernel .cu to judge instead of the in-repo controllers")
    group.addoption("--contract", default="fixed", help="contract entry the --kernel candidate is judged against")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Where the first parse took ``--kernel``'s value for a test path, adopt the invocation folder's config."""
    from _pytest.config.findpaths import determine_setup

    here = early_config.invocation_params.dir
    project = here / "pyproject.toml"
    if early_config.inipath is not None or not (here / "conftest.py").is_file() or not project.is_file():
        return
    ns = early_config.known_args_namespace
    rootpath, inipath, inicfg, _ = determine_setup(inifile=str(project), override_ini=ns.override_ini,
                                                   args=ns.file_or_dir, rootdir_cmd_arg=ns.rootdir or None,
                                                   invocation_dir=here)
    early_config._rootpath, early_config._inipath, early_config._inicfg = rootpath, inipath, inicfg
    early_config._inicache.clear()
    args[:0] = early_config._validate_args(early_config.getini("addopts"), "via addopts config")
    early_config.known_args_namespace = parser.parse_known_args(args, namespace=copy.copy(early_config.option))
    early_config.known_args_namespace.confcutdir = str(rootpath)


def pytest_configure(config):
    """A --kernel that cannot be judged is a usage error (one line), not an error in every test."""
    path = config.getoption("--kernel", default=None)
    if path is None:
        return
    from repro.core.contract import load
    from repro.core.errors import SuiteError

    try:
        load().source(config.getoption("--contract"), path)
    except SuiteError as err:
        raise pytest.UsageError(f"--kernel: {err}") from None
