"""Words and numbers about unjudged documents, shared by every report format: a compare cell's
judged@k and label-limited status, and an evaluation's range between the pessimistic and
optimistic readings."""

from __future__ import annotations

import math

from rankgate.compare import Cell
from rankgate.compare_unjudged import LABEL_LIMITED, LabelEvidence

__all__ = [
    "LABEL_LIMITED_MARKER",
    "RANGE_TOLERANCE",
    "judged_text",
    "label_limited_text",
    "range_text",
    "shows_range",
]

LABEL_LIMITED_MARKER = "? label-limited"
#: Pessimistic and optimistic means closer than this are one value: no range is shown.
RANGE_TOLERANCE = 1e-12


def judged_text(cell: Cell) -> str:
    """Both arms' judged@k, baseline first: ``"100%/78%"`` (empty without evidence)."""
    evidence = cell.evidence
    if evidence is None:
        return ""
    return f"{_share(evidence.baseline_judged)}/{_share(evidence.candidate_judged)}"


def label_limited_text(cell: Cell) -> str:
    """One sentence for a label-limited cell: its pairs, both judged@k and the deltas."""
    evidence = cell.evidence
    if cell.status != LABEL_LIMITED or evidence is None:
        return ""
    return (
        f"{cell.group} {cell.metric}: {evidence.unjudged_pairs:,} pairs to judge in the "
        f"candidate's top {evidence.depth} ({evidence.baseline_unjudged_pairs:,} in the "
        f"baseline's) · delta {_deltas(evidence)} · {evidence.reason or ''}"
    )


def _deltas(evidence: LabelEvidence) -> str:
    return ", ".join(f"{found.delta:+.4f} {found.policy}" for found in evidence.deltas)


def _share(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    text = f"{value:.0%}"
    # A share that rounds to 100% but is not complete must not read as complete.
    return "99%" if text == "100%" and value < 1.0 else text


def shows_range(bounds: tuple[float, float] | None) -> bool:
    """Whether an evaluation's (pessimistic, optimistic) means differ enough to show."""
    if bounds is None or any(math.isnan(value) for value in bounds):
        return False
    return abs(bounds[1] - bounds[0]) > RANGE_TOLERANCE


def range_text(bounds: tuple[float, float], digits: int = 4) -> str:
    """``"0.5800-0.7400"``, the lower number first (the optimistic reading is not an upper
    bound for every metric)."""
    low, high = sorted(bounds)
    return f"{low:.{digits}f}-{high:.{digits}f}"
