"""Numbers as JSON holds them: JSON has no NaN or infinity, so a value that is not finite is recorded as null."""

from __future__ import annotations

import math


def finite_or_none(x) -> float | None:
    """``float(x)``, or None where it is NaN or ±inf."""
    x = float(x)
    return x if math.isfinite(x) else None
