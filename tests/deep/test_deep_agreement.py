"""Agreement statistics (issue 34 item 3) on hand-built batches whose values follow from the definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")

from repro.learning.deep import agreement  # noqa: E402


def test_geometric_mean_falls_where_the_arithmetic_mean_does_not():
    """5 of 100 states with π deterministic on a non-greedy action (logit gap G nats): the geometric mean is
    about 10^(−0.05·G/ln 10), the arithmetic mean stays near 0.95, the match fraction is 0.95."""
    gap = 1000.0
    B, A = 100, 3
    q = torch.tensor([1.0, 0.0, 0.0]).expand(1, B, A).clone()
    logits = torch.zeros(1, B, A)
    logits[0, :, 0] = 50.0           # π agrees with Q's greedy action …
    logits[0, :5, 0] = 0.0
    logits[0, :5, 1] = gap           # … except on 5 states
    lp, match, tie = agreement.per_state(torch.log_softmax(logits.double(), -1), q.double())
    s = agreement.summarise(lp, match, tie)
    expected_geo = (95 * math.log10(1 / (1 + 2 * math.exp(-50))) + 5 * (-gap / math.log(10))) / 100
    assert s["log10_geo"].item() == pytest.approx(expected_geo, rel=1e-9)
    assert s["arith"].item() == pytest.approx(0.95, abs=1e-12)
    assert s["match"].item() == pytest.approx(0.95)
    assert s["log10_p01"].item() < -100
    assert s["ties"].item() == 0


def test_ties_are_excluded_and_counted():
    q = torch.tensor([[[1.0, 1.0, 0.0], [2.0, 0.0, 0.0]]])
    log_pi = torch.log(torch.tensor([[[0.1, 0.1, 0.8], [0.5, 0.25, 0.25]]]))
    s = agreement.summarise(*agreement.per_state(log_pi, q))
    assert s["ties"].item() == 1
    assert s["log10_geo"].item() == pytest.approx(math.log10(0.5))
    assert s["match"].item() == 1.0


def test_all_ties_read_nan():
    q = torch.zeros(1, 4, 3)
    s = agreement.summarise(*agreement.per_state(torch.log_softmax(torch.randn(1, 4, 3), -1), q))
    assert np.isnan(s["log10_geo"].item()) and s["ties"].item() == 4
