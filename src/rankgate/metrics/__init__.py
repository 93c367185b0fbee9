"""Metric definitions (``definitions``), their registry (``registry``) and shared kernels."""
