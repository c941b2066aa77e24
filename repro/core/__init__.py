"""repro/core."""
