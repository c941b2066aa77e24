"""Agreement between π and Q's greedy action, as the incident measured it (issue 34, item 3).

Per state s: log10 π(argmax Q | s). Over a batch of states (the KL's own minibatch, or a run's fixed probe
batch), for each run:

- ``log10_geo``: the mean of log10 π(argmax Q | s) — log10 of the *geometric* mean, the statistic the incident's
  ``q_pi_agree = 1e-22`` fits;
- ``arith``: the arithmetic mean of π(argmax Q | s);
- ``match``: the fraction of states where argmax π = argmax Q;
- ``log10_p01``: the 1st percentile of log10 π(argmax Q | s) over the batch;
- ``ties``: states where Q's two largest values are equal (argmax undefined): excluded from all four, counted.
"""

from __future__ import annotations

import math

import torch

LN10 = math.log(10.0)
FIELDS = ("log10_geo", "arith", "match", "log10_p01", "ties")


def per_state(log_pi: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(log10 π(argmax Q|s) [R, B], argmax π == argmax Q [R, B], tie [R, B])`` from ``log π`` and ``Q`` ``[R, B, A]``."""
    top2 = q.topk(2, dim=-1)
    greedy = top2.indices[..., :1]
    tie = top2.values[..., 0] == top2.values[..., 1]
    lp = log_pi.gather(-1, greedy).squeeze(-1) / LN10
    match = log_pi.argmax(-1) == greedy.squeeze(-1)
    return lp, match, tie


def summarise(lp: torch.Tensor, match: torch.Tensor, tie: torch.Tensor) -> dict[str, torch.Tensor]:
    """The :data:`FIELDS` per run (``[R]`` each) from :func:`per_state`'s outputs; a run whose every state ties
    reads NaN."""
    keep = ~tie
    n = keep.sum(-1)
    denom = n.clamp(min=1).to(lp.dtype)
    nan = torch.full_like(denom, float("nan"))
    geo = torch.where(keep, lp, 0.0).sum(-1) / denom
    arith = torch.where(keep, torch.pow(10.0, lp.double()), 0.0).sum(-1) / denom.double()
    m = torch.where(keep, match.to(lp.dtype), 0.0).sum(-1) / denom
    p01 = torch.nanquantile(torch.where(keep, lp, float("nan")).double(), 0.01, dim=-1).to(lp.dtype)
    some = n > 0
    return {"log10_geo": torch.where(some, geo, nan), "arith": torch.where(some, arith.to(lp.dtype), nan),
            "match": torch.where(some, m, nan), "log10_p01": torch.where(some, p01, nan),
            "ties": tie.sum(-1).to(lp.dtype)}
