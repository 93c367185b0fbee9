"""Stale labels: labels for documents missing from the corpus, and labels older than a maximum age,
removed before scoring, with counts overall and per segment (issue 4, part 6)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rankgate
from rankgate import InputError
from rankgate.errors import ConfigError, UsageError
from rankgate.stale import LabelFilter, parse_age, read_corpus

RECALL = rankgate.parse_metric("recall@20")
NDCG = rankgate.parse_metric("ndcg@10")
QT = "query_type"
CORPUS = frozenset({"d1", "d2", "d3", "d4", "d5"})


def _corpus_records() -> list[dict[str, Any]]:
    return [
        # q1: relevant d1, d3 retrieved; d9 is gone. recall 2/3 -> 2/2.
        {
            "query_id": "q1",
            "retrieved_ids": ["d1", "d2", "d3"],
            "relevant_ids": ["d1", "d3", "d9"],
            QT: "a",
        },
        # q2: grades d5=2 (retrieved at rank 2), d6=1 and d7=0 gone. recall 1/2 -> 1/1;
        # ndcg: dcg = 3/log2(3); ideal 3 + 1/log2(3) -> 3.
        {
            "query_id": "q2",
            "retrieved_ids": ["d4", "d5"],
            "relevance_scores": {"d5": 2, "d6": 1, "d7": 0},
            QT: "a",
        },
        # q3: its only relevant document d8 is gone: skipped as no_relevant, lost all relevant.
        {"query_id": "q3", "retrieved_ids": ["d1", "d8"], "relevant_ids": ["d8"], QT: "b"},
        # q4: untouched (a retrieved document missing from the corpus is not a label). recall 1.
        {"query_id": "q4", "retrieved_ids": ["d42", "d2"], "relevant_ids": ["d2"], QT: "b"},
        # q5: unlabeled.
        {"query_id": "q5", "retrieved_ids": ["d1"], QT: "b"},
        # q6: already no_relevant before filtering (only a grade-0 label, and it is stale).
        {"query_id": "q6", "retrieved_ids": ["d1"], "relevance_scores": {"d77": 0}, QT: "b"},
    ]


def _evaluate(
    records: list[dict[str, Any]], label_filter: LabelFilter | None = None, **kw: Any
) -> Any:
    settings = rankgate.Settings(
        segment_by=(QT,), resamples=50, label_filter=label_filter or LabelFilter(), **kw
    )
    return rankgate.evaluate(records, ["recall@20", "ndcg@10"], settings=settings)


def test_without_a_corpus_nothing_is_removed() -> None:
    evaluation = _evaluate(_corpus_records())
    summary = evaluation.summary
    assert (summary.labels_removed_stale, summary.lost_all_relevant) == (0, 0)
    assert summary.scored == 4
    # recall: q1 2/3, q2 1/2, q3 1 (d8 is retrieved), q4 1.
    assert evaluation.means[RECALL] == pytest.approx((2 / 3 + 1 / 2 + 1 + 1) / 4)


def test_corpus_filter_removes_stale_labels_and_recall_rises() -> None:
    evaluation = _evaluate(_corpus_records(), LabelFilter(corpus=CORPUS))
    summary = evaluation.summary
    assert summary.labels_removed_stale == 5  # d9, d6, d7, d8, d77
    assert summary.labels_removed_expired == 0
    assert summary.lost_all_relevant == 1  # q3 only: q6 had nothing relevant to lose
    assert summary.scored == 3
    assert summary.skipped == {"unlabeled": 1, "no_relevant": 2, "invalid": 0}
    assert summary.read == summary.scored + sum(summary.skipped.values())
    assert evaluation.query_ids == ("q1", "q2", "q4")
    assert evaluation.means[RECALL] == pytest.approx(1.0)
    per_query = {row["query_id"]: row for row in evaluation.per_query()}
    assert per_query["q1"]["recall@20"] == pytest.approx(1.0)
    assert per_query["q2"]["recall@20"] == pytest.approx(1.0)
    assert per_query["q2"]["ndcg@10"] == pytest.approx((3 / math.log2(3)) / 3)
    assert evaluation.overall.labels_removed_stale == 5
    assert evaluation.overall.lost_all_relevant == 1


def test_stale_counts_per_segment() -> None:
    evaluation = _evaluate(_corpus_records(), LabelFilter(corpus=CORPUS))
    a, b = evaluation.segment(QT, "a"), evaluation.segment(QT, "b")
    assert (a.labels_removed_stale, a.lost_all_relevant) == (3, 0)
    assert (b.labels_removed_stale, b.lost_all_relevant) == (2, 1)
    assert (a.scored, a.skipped["no_relevant"]) == (2, 0)
    assert (b.scored, b.skipped) == (1, {"unlabeled": 1, "no_relevant": 2, "invalid": 0})
    assert a.means[RECALL] == pytest.approx(1.0)
    assert b.means[RECALL] == pytest.approx(1.0)
    for group in (a, b):
        assert group.read == group.scored + sum(group.skipped.values())


def test_corpus_ids_are_compared_as_strings() -> None:
    records = [{"query_id": "n", "retrieved_ids": [17, 3], "relevant_ids": [17, 99]}]
    evaluation = rankgate.evaluate(
        records,
        ["recall@20"],
        settings=rankgate.Settings(
            label_filter=LabelFilter(corpus=frozenset({"17", "3"})), resamples=0
        ),
    )
    assert evaluation.summary.labels_removed_stale == 1
    assert evaluation.means[RECALL] == 1.0


# --- read_corpus ---------------------------------------------------------------------------------


def test_read_corpus_text_one_id_per_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_text("d1\n  d2  \n\nd3\r\n", encoding="utf-8")
    assert read_corpus(path) == frozenset({"d1", "d2", "d3"})


def test_read_corpus_csv_id_column(tmp_path: Path) -> None:
    path = tmp_path / "corpus.csv"
    path.write_text('title,id\n"Hello, world",d1\nx,d2\ny,\n', encoding="utf-8")
    assert read_corpus(path) == frozenset({"d1", "d2"})


def test_read_corpus_parquet_id_column(tmp_path: Path) -> None:
    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"title": ["a", "b", "c"], "id": [17, 3, None]}), path)
    assert read_corpus(path) == frozenset({"17", "3"})


@pytest.mark.parametrize("name", ["corpus.csv", "corpus.parquet"])
def test_read_corpus_without_id_column_names_the_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    if name.endswith(".csv"):
        path.write_text("doc_id,title\nd1,x\n", encoding="utf-8")
    else:
        pq.write_table(pa.table({"doc_id": ["d1"]}), path)
    with pytest.raises(InputError) as caught:
        read_corpus(path)
    message = str(caught.value)
    assert str(path) in message
    assert "'id'" in message
    assert "doc_id" in message  # the columns it does have


def test_read_corpus_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        read_corpus(tmp_path / "nope.txt")
    assert "nope.txt" in str(caught.value)


def test_corpus_file_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "corpus.csv"
    path.write_text("id\n" + "\n".join(sorted(CORPUS)) + "\n", encoding="utf-8")
    evaluation = _evaluate(_corpus_records(), LabelFilter(corpus=read_corpus(path)))
    assert evaluation.summary.labels_removed_stale == 5
    assert evaluation.means[RECALL] == pytest.approx(1.0)


def test_read_corpus_csv_with_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "corpus.csv"
    path.write_bytes(b"\xef\xbb\xbfid,title\nd1,x\nd2,y\n")
    assert read_corpus(path) == frozenset({"d1", "d2"})


def test_read_corpus_text_with_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\xef\xbb\xbfd1\nd2\n")
    assert read_corpus(path) == frozenset({"d1", "d2"})


# --- expiry by age -------------------------------------------------------------------------------

AS_OF = datetime(2024, 6, 1, tzinfo=UTC)  # with 180 days: cutoff 2023-12-04
OLD = "2023-11-01T00:00:00Z"
RECENT = "2024-05-01T12:00:00+00:00"


def test_parse_age() -> None:
    assert parse_age("180d") == timedelta(days=180)
    assert parse_age("12h") == timedelta(hours=12)
    assert parse_age("2w") == timedelta(weeks=2)
    assert parse_age("90m") == timedelta(minutes=90)
    for bad in ("180", "d", "1.5d", "-3d", "3y", ""):
        with pytest.raises(ConfigError):
            parse_age(bad)


def _age_records() -> list[dict[str, Any]]:
    return [
        # e1: every label old -> expired, lost all relevant, no_relevant.
        {
            "query_id": "e1",
            "retrieved_ids": ["d1"],
            "relevant_ids": ["d1", "d2"],
            "labeled_at": OLD,
            QT: "a",
        },
        # e2: recent -> kept; recall 1/2.
        {
            "query_id": "e2",
            "retrieved_ids": ["d1"],
            "relevant_ids": ["d1", "d2"],
            "labeled_at": RECENT,
            QT: "a",
        },
        # e3: per-document stamps: d1 old (expired), d2 recent; d3 has no stamp (kept). recall 1/2 -> 2/2.
        {
            "query_id": "e3",
            "retrieved_ids": ["d2", "d3"],
            "relevant_ids": ["d1", "d2", "d3"],
            "labeled_at": {"d1": OLD, "d2": RECENT},
            QT: "b",
        },
        # e4: no labeled_at at all -> nothing expires; recall 1.
        {"query_id": "e4", "retrieved_ids": ["d1"], "relevant_ids": ["d1"], QT: "b"},
        # e5: a zone-less timestamp is taken as UTC: 2023-12-01 is older than the cutoff; the
        # other label's 2023-12-10 is not. recall 1/2 -> 0/1 (d9 is kept, not retrieved).
        {
            "query_id": "e5",
            "retrieved_ids": ["d1"],
            "relevance_scores": {"d1": 1, "d9": 2},
            "labeled_at": {"d1": "2023-12-01T00:00:00", "d9": "2023-12-10T00:00:00"},
            QT: "b",
        },
    ]


def test_labels_older_than_max_age_expire() -> None:
    evaluation = _evaluate(_age_records(), LabelFilter(max_age=parse_age("180d"), as_of=AS_OF))
    summary = evaluation.summary
    assert summary.labels_removed_expired == 2 + 1 + 1  # e1: d1, d2; e3: d1; e5: d1
    assert summary.labels_removed_stale == 0
    assert summary.lost_all_relevant == 1
    assert summary.skipped["no_relevant"] == 1
    assert evaluation.query_ids == ("e2", "e3", "e4", "e5")
    per_query = {row["query_id"]: row["recall@20"] for row in evaluation.per_query()}
    assert per_query == pytest.approx({"e2": 0.5, "e3": 1.0, "e4": 1.0, "e5": 0.0})
    a, b = evaluation.segment(QT, "a"), evaluation.segment(QT, "b")
    assert (a.labels_removed_expired, a.lost_all_relevant, a.scored) == (2, 1, 1)
    assert (b.labels_removed_expired, b.lost_all_relevant, b.scored) == (2, 0, 3)


def test_without_expiry_every_label_counts() -> None:
    evaluation = _evaluate(_age_records())
    per_query = {row["query_id"]: row["recall@20"] for row in evaluation.per_query()}
    # e3 2/3 (rises to 1 with expiry); e5 1/2 (falls to 0: its retrieved label expired).
    assert per_query == pytest.approx({"e1": 0.5, "e2": 0.5, "e3": 2 / 3, "e4": 1.0, "e5": 0.5})
    assert evaluation.summary.labels_removed_expired == 0


def test_a_longer_max_age_keeps_more() -> None:
    evaluation = _evaluate(_age_records(), LabelFilter(max_age=parse_age("400d"), as_of=AS_OF))
    assert evaluation.summary.labels_removed_expired == 0


def test_corpus_and_age_together_count_separately() -> None:
    records = _age_records()
    corpus = frozenset({"d1", "d2"})  # d3 (e3) and d9 (e5) are stale
    evaluation = _evaluate(
        records, LabelFilter(corpus=corpus, max_age=parse_age("180d"), as_of=AS_OF)
    )
    summary = evaluation.summary
    assert summary.labels_removed_stale == 2
    # e1: d1, d2; e3: d1; e5: d1 -> e5 then has no label at all.
    assert summary.labels_removed_expired == 4
    assert summary.lost_all_relevant == 2  # e1, e5
    assert summary.read == summary.scored + sum(summary.skipped.values())


@pytest.mark.parametrize(
    ("stamps", "field"),
    [
        ("yesterday", "labeled_at"),
        ("2024-13-45T00:00:00Z", "labeled_at"),
        (20240101, "labeled_at"),
        ({"d1": "not a date"}, "labeled_at.d1"),
        ({"d1": 17}, "labeled_at.d1"),
    ],
)
def test_malformed_timestamp_is_an_input_error_naming_the_field(stamps: Any, field: str) -> None:
    records = [
        {"query_id": "ok", "retrieved_ids": ["d1"], "relevant_ids": ["d1"], "labeled_at": RECENT},
        {"query_id": "bad", "retrieved_ids": ["d1"], "relevant_ids": ["d1"], "labeled_at": stamps},
    ]
    with pytest.raises(InputError) as caught:
        _evaluate(records, LabelFilter(max_age=parse_age("180d"), as_of=AS_OF))
    assert caught.value.field == field
    assert f"field '{field}'" in str(caught.value)
    assert "row 2" in str(caught.value)


def test_malformed_timestamp_is_skipped_as_invalid_under_on_invalid_skip() -> None:
    records = [
        {
            "query_id": "ok",
            "retrieved_ids": ["d1"],
            "relevant_ids": ["d1"],
            "labeled_at": RECENT,
            QT: "a",
        },
        {
            "query_id": "bad",
            "retrieved_ids": ["d1"],
            "relevant_ids": ["d1"],
            "labeled_at": "nope",
            QT: "a",
        },
    ]
    evaluation = _evaluate(
        records, LabelFilter(max_age=parse_age("180d"), as_of=AS_OF), on_invalid="skip"
    )
    assert evaluation.summary.skipped["invalid"] == 1
    assert evaluation.summary.scored == 1
    assert evaluation.overall.read == 2
    assert evaluation.segment(QT, "a").read == 1  # invalid records belong to no segment
    assert evaluation.segment(QT, "a").labeled == 1
    assert evaluation.overall.read == evaluation.overall.scored + sum(
        evaluation.overall.skipped.values()
    )


def test_naive_as_of_is_taken_as_utc() -> None:
    evaluation = _evaluate(
        _age_records(), LabelFilter(max_age=parse_age("180d"), as_of=datetime(2024, 6, 1))
    )
    assert evaluation.summary.labels_removed_expired == 4


def test_per_document_stamps_from_a_parquet_map_column(tmp_path: Path) -> None:
    path = tmp_path / "traces.parquet"
    table = pa.table(
        {
            "query_id": ["p1", "p2"],
            "retrieved_ids": [["a", "b"], ["a"]],
            "relevant_ids": [["a", "b"], ["a"]],
            "labeled_at": pa.array(
                [[("a", OLD), ("b", RECENT)], [("a", RECENT)]],
                type=pa.map_(pa.string(), pa.string()),
            ),
        }
    )
    pq.write_table(table, path)
    evaluation = rankgate.evaluate(
        path,
        ["recall@20"],
        settings=rankgate.Settings(
            label_filter=LabelFilter(max_age=parse_age("180d"), as_of=AS_OF), resamples=0
        ),
    )
    assert evaluation.summary.labels_removed_expired == 1  # p1's label on a
    assert evaluation.means[RECALL] == 1.0


def test_per_document_stamps_with_integer_document_ids() -> None:
    records = [
        {
            "query_id": "i",
            "retrieved_ids": [17, 18],
            "relevant_ids": [17, 18],
            "labeled_at": {17: OLD},
            QT: "ids",  # _evaluate segments by it, and a field no record has is an error
        }
    ]
    evaluation = _evaluate(records, LabelFilter(max_age=parse_age("180d"), as_of=AS_OF))
    assert evaluation.summary.labels_removed_expired == 1


def test_per_document_stamps_from_csv_json_text(tmp_path: Path) -> None:
    path = tmp_path / "traces.csv"
    cell = '"{""a"": ""' + OLD + '""}"'
    path.write_text(
        "query_id,retrieved_ids,relevant_ids,labeled_at\n"
        f'c1,"[""a"",""b""]","[""a"",""b""]",{cell}\n',
        encoding="utf-8",
    )
    evaluation = _evaluate_path(path)
    assert evaluation.summary.labels_removed_expired == 1


def test_single_stamp_from_csv_cell(tmp_path: Path) -> None:
    path = tmp_path / "traces.csv"
    path.write_text(
        "query_id,retrieved_ids,relevant_ids,labeled_at\n"
        f'c1,"[""a"",""b""]","[""a"",""b""]",{OLD}\n'
        f'c2,"[""a""]","[""a""]",{RECENT}\n',
        encoding="utf-8",
    )
    evaluation = _evaluate_path(path)
    assert evaluation.summary.labels_removed_expired == 2
    assert evaluation.summary.lost_all_relevant == 1
    assert evaluation.query_ids == ("c2",)


def _evaluate_path(path: Path) -> Any:
    return rankgate.evaluate(
        path,
        ["recall@20"],
        settings=rankgate.Settings(
            label_filter=LabelFilter(max_age=parse_age("180d"), as_of=AS_OF), resamples=0
        ),
    )


def test_native_datetimes_in_labeled_at_expire_like_iso_text(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A Parquet timestamp column arrives as datetime objects; they count like ISO strings."""
    table = pa.table(
        {
            "query_id": ["fresh", "old"],
            "retrieved_ids": [["a"], ["a"]],
            "relevant_ids": [["a"], ["a"]],
            "labeled_at": pa.array(
                [datetime(2024, 5, 1, tzinfo=UTC), datetime(2023, 1, 1, tzinfo=UTC)],
                type=pa.timestamp("s", tz="UTC"),
            ),
        }
    )
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    evaluation = rankgate.evaluate(
        path,
        ["mrr"],
        settings=rankgate.Settings(
            label_filter=LabelFilter(max_age=parse_age("180d"), as_of=AS_OF)
        ),
    )
    assert evaluation.summary.labels_removed_expired == 1
    assert evaluation.query_ids == ("fresh",)
    assert evaluation.summary.skipped["no_relevant"] == 1
