"""repro/runners."""
