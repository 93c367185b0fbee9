"""Number formatting shared by the reports."""

from __future__ import annotations

__all__ = ["format_against", "format_margin", "format_threshold"]

_MAX_DIGITS = 12


def format_against(value: float, threshold: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, or more when fewer would print it equal to a different
    ``threshold`` (0.69996 against 0.7 reads 0.69996, never a failing "0.700 < 0.700")."""
    while (
        digits < _MAX_DIGITS
        and value != threshold
        and (f"{value:.{digits}f}" == f"{threshold:.{digits}f}")
    ):
        digits += 1
    return f"{value:.{digits}f}"


def format_threshold(threshold: float) -> str:
    """A threshold as the user wrote it: the shortest text that reads back as the same float."""
    text = repr(float(threshold))
    return text.removesuffix(".0") if text.endswith(".0") else text


def format_margin(margin: float) -> str:
    """A margin with its sign, never a misleading "-0.0000" for a tiny miss."""
    return ("-" if margin < 0 else "+") + format_against(abs(margin), 0.0, 4)
