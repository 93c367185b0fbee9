"""``fast.join_and_score``: a block cut in halves joined and scored on two threads gives what the
reference gives for the whole block: ``BatchBuilder``'s join row by row (the pure-Python twin of the
compiled join) and every metric's numpy definition, with the forced zeros applied as documented."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from rankgate import fast
from rankgate.spec import parse_metric

pytestmark = pytest.mark.skipif(not fast.available(), reason="the compiled kernels were not built")

SPECS = [
    parse_metric(text)
    for text in (
        "ndcg_cut@10",
        "precision@10",
        "recall@100",
        "map",
        "mrr",
        "judged@10",
        "bpref",  # no compiled twin: scored by its definition in each half
        "rbp",
    )
]
DEFAULTS = {"rel": 1.0}


def _columns(rows: list[dict[str, Any]]) -> tuple[Any, Any, Any, Any]:
    text = pa.large_string()
    retrieved = pa.array([row["retrieved"] for row in rows], pa.large_list(text))
    relevant = pa.array([row.get("relevant") for row in rows], pa.large_list(text))
    grades = pa.array(
        [None if row.get("grades") is None else list(row["grades"].items()) for row in rows],
        pa.map_(text, pa.float64()),
    )
    values = fast.numpy_of(grades.items.fill_null(np.nan)).astype(np.float64)
    return (
        fast.IdColumns.from_arrow(retrieved),
        fast.IdColumns.from_arrow(relevant),
        fast.IdColumns.from_arrow(grades),
        values,
    )


def _traces(count: int, seed: int, *, empty_id_at: int | None = None) -> list[dict[str, Any]]:
    """Rankings over small pools (so IDs repeat, and labels hit and miss), labeled in the three
    ways a trace can be: not at all, relevant IDs, graded (some with no relevant grade)."""
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(count):
        pool = [f"d{i}" for i in range(int(rng.integers(1, 40)))]
        ranking = [str(doc) for doc in rng.choice(pool, size=int(rng.integers(0, 30)))]
        if index == empty_id_at:
            ranking.append("")
        kind = int(rng.integers(0, 4))
        row: dict[str, Any] = {"retrieved": ranking}
        labeled = [str(doc) for doc in rng.choice(pool, size=int(rng.integers(0, 6)))]
        if kind == 1:
            row["relevant"] = labeled
        elif kind >= 2:
            top = 3.0 if kind == 2 else 0.0  # kind 3: no grade reaches the threshold
            row["grades"] = {doc: float(rng.integers(0, 4)) if top else 0.0 for doc in labeled}
        rows.append(row)
    return rows


def _scored(
    rows: Any, columns: tuple[Any, Any, Any, Any], scratch: fast.Scratch, *, skip: bool = True
) -> fast.Scored:
    return fast.join_and_score(
        rows,
        *columns,
        SPECS,
        DEFAULTS,
        threshold=1.0,
        skip_no_relevant=skip,
        unique_map_keys=True,
        scratch=scratch,
    )


def _reference(columns: tuple[Any, Any, Any, Any], rows: Any, skip: bool) -> Any:
    joined = fast._join_in_python(
        rows,
        *columns,
        threshold=1.0,
        skip_no_relevant=skip,
        unique_map_keys=True,
    )
    values = fast.score(joined.batch, SPECS, DEFAULTS, native=False)
    zero = joined.forced_zero[joined.status == fast.ROW_SCORED]
    for column in values.values():
        column[zero] = 0.0
    return joined, values


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("count", [7, fast.PARALLEL_ROWS, 3 * fast.PARALLEL_ROWS + 5])
def test_halves_on_two_threads_equal_the_reference_over_the_whole_block(
    count: int, skip: bool
) -> None:
    columns = _columns(_traces(count, seed=count))
    # Every other row, so each half reads rows scattered over the columns.
    rows = np.arange(0, count, 2, dtype=np.int64) if count > 7 else np.arange(count)
    scored = _scored(rows, columns, fast.Scratch(), skip=skip)
    joined, expected = _reference(columns, rows, skip)
    np.testing.assert_array_equal(scored.status, joined.status)
    np.testing.assert_array_equal(scored.duplicates, joined.duplicates)
    np.testing.assert_array_equal(scored.depths, joined.batch.ranked_lengths)
    assert scored.values is not None
    assert (scored.status == fast.ROW_SCORED).sum() == len(scored.depths)
    for spec in SPECS:
        np.testing.assert_allclose(scored.values[spec], expected[spec], rtol=1e-12, atol=1e-12)
    if len(rows) >= fast.PARALLEL_ROWS:
        assert fast._helper is not None  # the block was cut in two


def test_a_row_for_the_validator_in_either_half_gives_no_values_and_names_the_row() -> None:
    count = 2 * fast.PARALLEL_ROWS
    for at in (3, count - 4):  # one in each half
        columns = _columns(_traces(count, seed=at, empty_id_at=at))
        scored = _scored(np.arange(count, dtype=np.int64), columns, fast.Scratch())
        assert scored.values is None
        assert np.flatnonzero(scored.status == fast.ROW_FOR_VALIDATOR).tolist() == [at]


def test_the_scratch_of_each_half_is_reused_block_after_block() -> None:
    scratch = fast.Scratch()
    columns = _columns(_traces(2 * fast.PARALLEL_ROWS, seed=1))
    rows = np.arange(2 * fast.PARALLEL_ROWS, dtype=np.int64)
    first = _scored(rows, columns, scratch)
    held = {id(scratch.part(0)), id(scratch.part(1))}
    again = _scored(rows, columns, scratch)
    assert {id(scratch.part(0)), id(scratch.part(1))} == held
    assert first.values is not None and again.values is not None
    # The first block's values are its own arrays, not views the second block overwrote.
    for spec in SPECS:
        np.testing.assert_array_equal(first.values[spec], again.values[spec])


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_forked_child_scores_with_a_helper_of_its_own() -> None:
    import os

    columns = _columns(_traces(2 * fast.PARALLEL_ROWS, seed=5))
    rows = np.arange(2 * fast.PARALLEL_ROWS, dtype=np.int64)
    _scored(rows, columns, fast.Scratch())  # the parent's helper thread exists now
    assert fast._helper is not None
    child = os.fork()
    if child == 0:  # the child: it must finish, not wait on the parent's thread
        try:
            scored = _scored(rows, columns, fast.Scratch())
            os._exit(0 if scored.values is not None else 1)
        except BaseException:
            os._exit(2)
    import signal
    import time

    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            pytest.fail("the forked child waited on its parent's helper thread")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_a_caller_that_finds_the_helper_busy_scores_its_whole_block_itself() -> None:
    count = 3 * fast.PARALLEL_ROWS
    columns = _columns(_traces(count, seed=11))
    rows = np.arange(count, dtype=np.int64)
    alone = _scored(rows, columns, fast.Scratch())
    assert fast._helper_idle.acquire(blocking=False)  # as though another caller's half ran
    try:
        busy = _scored(rows, columns, fast.Scratch())
        assert not fast._helper_idle.acquire(blocking=False)  # still ours: not taken, not freed
    finally:
        fast._helper_idle.release()
    assert alone.values is not None and busy.values is not None
    np.testing.assert_array_equal(busy.status, alone.status)
    for spec in SPECS:
        np.testing.assert_array_equal(busy.values[spec], alone.values[spec])
    # And free again afterwards: the next block is cut in two as before.
    assert fast._helper_idle.acquire(blocking=False)
    fast._helper_idle.release()
