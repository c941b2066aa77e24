"""The backends' registry (repro/backends/__init__.py): a new entry, and nothing else, is a backend everywhere.

The made-up backend is the host's own class under another name ("alias"): what the registry gives it (the
name, ``get_backend``, ``--backend``, the workers' start method, the backend-parametrised tests) is all the
registry's doing, and its runs are the host's bits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from repro import backends
from repro.core.isv import new_isv
from repro.core.paths import ROOT
from repro.runners import isolation
from repro.runners.scenarios import catalogue

PLUGIN = """
import json, os

from repro.backends import BackendEntry, register
from repro.backends.host import HostBackend


class AliasBackend(HostBackend):
    pass


register(BackendEntry("alias", "rlq_alias_backend:AliasBackend", start_method="fork"))


def pytest_collection_modifyitems(config, items):
    # what each backend-parametrised test runs on: (test, its other parameters) per backend
    seen = []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "backend_name" in params:
            rest = sorted((k, repr(v)) for k, v in params.items() if k != "backend_name")
            seen.append([params["backend_name"], item.path.name, item.originalname, rest])
    with open(os.environ["RLQ_ALIAS_OUT"], "w") as f:
        json.dump(seen, f)
"""


class _Alias(backends.REGISTRY["host"].load()):
    pass


@pytest.fixture
def alias(monkeypatch):
    """``alias`` registered in this process for one test (the registry and the backends' cache put back after)."""
    monkeypatch.setattr(backends, "REGISTRY", dict(backends.REGISTRY))
    monkeypatch.setattr(backends, "_cache", dict(backends._cache))
    backends.register(backends.BackendEntry("alias", f"{__name__}:_Alias", start_method="fork"))
    return backends.get_backend("alias")


def test_a_registered_entry_alone_is_a_backend_with_the_hosts_bits(alias, contract, host):
    assert isinstance(alias, _Alias) and alias.name == "alias" and alias is backends.get_backend("alias")
    assert "alias" in backends.backend_names()
    worker = isolation.Worker(alias, contract.source("fixed"), contract.slots, contract.controller("fixed"))
    assert worker.method == "fork"
    scenario = catalogue(contract.controller("fixed"))[0]
    isv, kl, target = new_isv(contract.slots, [scenario.lambda0]), scenario.kl[:, None], scenario.target[:, None]
    got = alias.compile(contract.source("fixed"), contract.slots).run_looped(isv, kl, target)
    want = host.compile(contract.source("fixed"), contract.slots).run_looped(isv, kl, target)
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g.view(np.uint32), w.view(np.uint32))


def test_a_name_twice_or_an_unknown_start_method_is_refused(alias):
    with pytest.raises(backends.SuiteError, match="already registered"):
        backends.register(backends.BackendEntry("alias", f"{__name__}:_Alias", start_method="fork"))
    with pytest.raises(backends.SuiteError, match="start_method must be one of fork, forkserver, spawn"):
        backends.register(backends.BackendEntry("other", f"{__name__}:_Alias", start_method="thread"))
    with pytest.raises(backends.SuiteError, match="unknown backend 'nope'"):
        backends.get_backend("nope")


@pytest.mark.slow  # a second pytest collecting the whole suite: about 10 s on 2 cores
def test_every_backend_parametrised_test_runs_on_a_new_entry(tmp_path):
    """A plugin that registers ``alias`` and nothing else: pytest collects every backend-parametrised test on it
    with the host's parameters, and the alias's cases of one module pass."""
    (tmp_path / "rlq_alias_backend.py").write_text(textwrap.dedent(PLUGIN))
    out = tmp_path / "seen.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "RLQ_ALIAS_OUT": str(out)}
    env.pop("PYTEST_XDIST_WORKER", None)
    base = [sys.executable, "-m", "pytest", "-p", "rlq_alias_backend", "-p", "no:cacheprovider", "-q"]
    done = subprocess.run([*base, "--collect-only", "tests"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    seen = json.loads(out.read_text())
    on = {b: {json.dumps(rest) for name, *rest in seen if name == b} for b in ("host", "alias")}
    assert on["host"] and on["alias"] == on["host"]
    done = subprocess.run([*base, "tests/test_kernel_by_hand.py", "-k", "alias"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-2000:]
