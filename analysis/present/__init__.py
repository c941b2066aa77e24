"""analysis/present."""
