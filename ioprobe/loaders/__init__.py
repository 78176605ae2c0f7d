"""Helpers users import into their own datasets: ``files``, a metered opener for local paths
and fsspec URLs whose reads a watched loader counts as storage."""
