"""analysis/judge."""
