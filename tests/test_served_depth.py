"""Served depth: how many distinct IDs the scored rankings hold, the warning when a metric's k
reaches past what most rankings hold, and the one when a gate's k is not the depth users see."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rankgate import Settings, evaluate
from rankgate.cli import main
from rankgate.errors import ConfigError


def _traces(lengths: list[int]) -> list[dict[str, Any]]:
    """One trace per length; every ranking repeats its first ID once (a duplicate the depth must
    not count) and has d0 relevant."""
    rows = []
    for index, length in enumerate(lengths):
        ids = [f"d{i}" for i in range(length)]
        rows.append(
            {"query_id": f"q{index}", "retrieved_ids": ids + ids[:1], "relevant_ids": ["d0"]}
        )
    return rows


LENGTHS = [20] * 12 + [5, 8, 3] + [40] * 5  # 20 rankings


def _percentile_10(values: list[int]) -> float:
    """The 10th percentile by linear interpolation between closest ranks (Hyndman & Fan type 7),
    worked out here independently of the implementation."""
    ordered = sorted(values)
    position = 0.1 * (len(ordered) - 1)
    low = int(position)
    fraction = position - low
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + fraction * (ordered[high] - ordered[low])


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def rankgate(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def run(*args: object) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 2
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.mark.parametrize("as_file", [True, False])
def test_depth_is_median_and_tenth_percentile_of_distinct_ids(
    tmp_path: Path, as_file: bool
) -> None:
    rows = _traces(LENGTHS)
    source: Any = _write(tmp_path / "t.jsonl", rows) if as_file else rows
    depth = evaluate(source, ["precision@10"]).summary.served_depth
    assert depth is not None and depth.queries == len(LENGTHS)
    assert depth.median == statistics.median(LENGTHS) == 20
    assert depth.p10 == pytest.approx(_percentile_10(LENGTHS))


def test_skipped_queries_do_not_count_toward_depth() -> None:
    rows = [*_traces([10, 10, 10]), {"query_id": "u", "retrieved_ids": ["x"]}]
    depth = evaluate(rows, ["mrr"]).summary.served_depth
    assert depth is not None and depth.queries == 3 and depth.median == 10


def test_k_past_the_median_ranking_warns(
    tmp_path: Path, rankgate: Callable[..., tuple[int, str, str]]
) -> None:
    traces = _write(tmp_path / "t.jsonl", _traces(LENGTHS))
    args = ["-m", "precision@50", "-m", "ndcg@10", "--no-config", "--no-progress"]
    code, out, _ = rankgate("eval", traces, *args, "--color", "never")
    assert code == 0
    assert "warning: precision@50 reads the top 50, but the median ranking holds 20 IDs" in out
    assert "ndcg@10 reads" not in out
    assert "served depth: median 20 IDs per ranking" in out
    report = json.loads(rankgate("eval", traces, *args, "--format", "json")[1])
    assert report["summary"]["served_depth"]["median"] == 20
    assert (
        sum("precision@50 reads the top 50, but the median" in w for w in report["warnings"]) == 1
    )
    markdown = rankgate("eval", traces, *args, "--format", "markdown")[1]
    assert "precision@50 reads the top 50, but the median ranking holds 20 IDs" in markdown
    assert "served depth: median 20" in markdown
    html = rankgate("eval", traces, *args, "--format", "html")[1]
    assert "precision@50 reads the top 50, but the median ranking holds 20 IDs" in html
    assert "median ranking depth (IDs)" in html


def test_a_gate_cut_elsewhere_than_served_k_warns(
    tmp_path: Path, rankgate: Callable[..., tuple[int, str, str]]
) -> None:
    traces = _write(tmp_path / "t.jsonl", _traces(LENGTHS))
    base = ["--no-config", "--no-progress", "--format", "json", "--served-k", "10"]
    _, out, _ = rankgate("eval", traces, *base, "-g", "ndcg@20>=0.1", "-g", "mrr@10>=0.1")
    warnings = json.loads(out)["warnings"]
    assert any("gate on ndcg@20 reads the top 20" in w and "served_k = 10" in w for w in warnings)
    assert not any("mrr@10" in w for w in warnings)
    assert json.loads(out)["settings"]["served_k"] == 10
    # A metric that is not gated is not the concern of served_k.
    _, out, _ = rankgate("eval", traces, *base, "-m", "recall@20", "-g", "mrr@10>=0.1")
    assert not any("served_k" in w for w in json.loads(out)["warnings"])
    code, _, err = rankgate("eval", traces, "--served-k", "0", "--no-config")
    assert code == 2 and "--served-k" in err


def test_served_k_in_settings() -> None:
    rows = _traces([10] * 5)
    evaluation = evaluate(rows, ["map"], ["map>=0.1"], settings=Settings(served_k=10))
    assert any("gate on map reads the whole ranking" in w for w in evaluation.warnings)
    with pytest.raises(ConfigError, match="served_k"):
        Settings(served_k=0)


@pytest.mark.parametrize("count", [1, 2, 3, 10, 101, 1000])
def test_depth_figures_from_counts_equal_numpy_percentiles(count: int) -> None:
    """What partitions combine (depth -> rankings) gives numpy's own percentiles of the depths."""
    from rankgate.evaluate import ServedDepth

    depths = np.random.default_rng(count).integers(0, 40, count)
    values, counts = np.unique(depths, return_counts=True)
    figures = ServedDepth.from_histogram(dict(zip(values.tolist(), counts.tolist(), strict=True)))
    assert figures is not None and figures.queries == count
    median, p10 = np.percentile(depths, [50, 10])
    assert figures.median == pytest.approx(median, abs=1e-12)
    assert figures.p10 == pytest.approx(p10, abs=1e-12)
    assert ServedDepth.from_histogram({}) is None
