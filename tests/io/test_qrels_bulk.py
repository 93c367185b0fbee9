"""The bulk qrels reader (``io.trec.qrels_table``) against the line reader, which stays the
definition: ``read_qrels``'s dicts made into a label table. A file the bulk reader takes gives
that same table; a file the line reader refuses is never taken; and ``label_table`` of any qrels
file answers as the line reader does, its errors included."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rankgate import InputError, fast
from rankgate.id_index import IdIndex
from rankgate.io import limits
from rankgate.io.trec import qrels_table, read_qrels
from rankgate.labels import label_table

pytestmark = pytest.mark.skipif(not fast.available(), reason="the compiled kernels are not built")

QUERY_IDS = ["q1", "q2", "q10", "Q1", "é", "q-3"]
DOCUMENT_IDS = ["d1", "d2", "D2", "d10", "ü-doc", "a.b", "x" * 30]
GRADES = ["0", "1", "2", "3", "-1", "-2", "1.5", "2.9", "+2", ".5", "2e0", "-0", "1.", "007"]
# Grades and spacing the bulk reader must leave to the line reader, or that are refused.
ODD_GRADES = ["1_0", "inf", "nan", "x", "1e999", "٣"]
SEPARATORS = [" ", "\t", "  ", " \t", "\t\t"]


def line_reader_table(path: Path) -> pa.Table:
    return label_table(read_qrels(path))


def write(path: Path, text: str, *, gzipped: bool = False) -> Path:
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gzipped else data)
    return path


@st.composite
def qrels_text(draw: st.DrawFn, odd: bool) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 40))):
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from(["", " ", "\t", "\r"])))
            continue
        separator = draw(st.sampled_from(SEPARATORS if odd else [" "]))
        grade = draw(st.sampled_from(GRADES + ODD_GRADES if odd else ["0", "1", "2", "3", "-1"]))
        columns = [
            draw(st.sampled_from(QUERY_IDS)),
            draw(st.sampled_from(["0", "Q0"])),
            draw(st.sampled_from(DOCUMENT_IDS)),
            grade,
        ]
        if odd and draw(st.integers(0, 19)) == 0:
            columns = columns[: draw(st.integers(1, 3))]  # too few columns
        if odd and draw(st.integers(0, 19)) == 0:
            columns.append("extra")
        lines.append(draw(st.sampled_from(["", " "])) + separator.join(columns))
    ending = draw(st.sampled_from(["\n", "\r\n"])) if odd else "\n"
    text = ending.join(lines) + draw(st.sampled_from([ending, ""]))
    if odd and draw(st.booleans()):
        text = "\ufeff" + text
    if odd and draw(st.integers(0, 9)) == 0:
        spot = draw(st.integers(0, len(text)))
        text = (
            text[:spot] + draw(st.sampled_from(["\x0b", "\x1f", "\u00a0", "\u3000"])) + text[spot:]
        )
    return text


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=qrels_text(odd=True), gzipped=st.booleans())
def test_bulk_reader_gives_the_line_readers_table_or_leaves_the_file(
    tmp_path: Path, text: str, gzipped: bool
) -> None:
    path = write(tmp_path / "labels.qrels", text, gzipped=gzipped)
    bulk = qrels_table(path)
    try:
        expected = line_reader_table(path)
    except InputError:
        assert bulk is None, "the bulk reader took a file the line reader refuses"
        return
    if bulk is not None:
        assert bulk.schema == expected.schema
        assert bulk.to_pylist() == expected.to_pylist()
    # Through label_table, the table is the line reader's whoever read it.
    assert label_table(path).to_pylist() == expected.to_pylist()


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=qrels_text(odd=False))
def test_plain_files_are_read_in_bulk(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "labels.qrels", text)
    expected = line_reader_table(path)
    bulk = qrels_table(path)
    if not expected.num_rows:
        return  # an empty file is the line reader's: nothing to gain
    assert bulk is not None
    assert bulk.equals(expected)


def test_repeated_pairs_keep_the_first_place_and_the_last_grade(tmp_path: Path) -> None:
    path = write(
        tmp_path / "labels.qrels",
        "q2 0 b 1\nq1 0 a 3\nq2 0 a 2\nq2 0 b -1\nq1 0 c 2.7\nq2 0 b 3\n",
    )
    table = qrels_table(path)
    assert table is not None
    assert table.to_pylist() == [
        {"query_id": "q2", "relevance_scores": [("b", 3.0), ("a", 2.0)]},
        {"query_id": "q1", "relevance_scores": [("a", 3.0), ("c", 2.0)]},
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q1 0 a 1\nq1 0 b\n", r"labels.qrels:2: qrels line needs"),
        ("q1 0 a 1\nq1 0 b inf\n", r"labels.qrels:2: field 'relevance': expected a number"),
        ("q1 0 a 1\nq1 0 b 1 x\n", r"labels.qrels:2: qrels line needs"),
    ],
)
def test_a_refused_file_gets_the_line_readers_message(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path / "labels.qrels", text)
    assert qrels_table(path) is None
    with pytest.raises(InputError, match=message):
        label_table(path)


def test_limits_send_the_file_to_the_line_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "labels.qrels", "q1 0 " + "d" * 40 + " 1\n")
    monkeypatch.setattr(limits, "MAX_ID_BYTES", 32)
    assert qrels_table(path) is None
    with pytest.raises(InputError, match="docno"):
        label_table(path)
    monkeypatch.setattr(limits, "MAX_ID_BYTES", 8 * 1024)
    monkeypatch.setattr(limits, "MAX_LABELS_PER_QUERY", 2)
    write(path, "q1 0 a 1\nq1 0 b 1\nq1 0 c 1\n")
    assert qrels_table(path) is None
    with pytest.raises(InputError, match="more than 2 labels"):
        label_table(path)


def test_a_file_larger_than_the_bulk_limit_is_read_line_by_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rankgate.io import trec

    text = "q1 0 a 1\nq1 0 b 2\n"
    path = write(tmp_path / "labels.qrels", text, gzipped=True)
    monkeypatch.setattr(trec, "BULK_QRELS_BYTES", len(text) - 1)
    assert qrels_table(path) is None
    assert label_table(path).to_pylist() == line_reader_table(path).to_pylist()
    monkeypatch.setattr(trec, "BULK_QRELS_BYTES", len(text))
    assert qrels_table(path) is not None


def test_invalid_utf8_is_the_line_readers(tmp_path: Path) -> None:
    path = tmp_path / "labels.qrels"
    path.write_bytes(b"q1 0 a 1\nq\xff 0 b 1\n")
    assert qrels_table(path) is None
    with pytest.raises(InputError, match=r"labels.qrels:2: line is not valid UTF-8"):
        label_table(path)


# --------------------------------------------------------------------------------------------
# IdIndex: index_in's answers, from one hashing of the set


@settings(max_examples=200, deadline=None)
@given(
    members=st.lists(st.sampled_from(QUERY_IDS + DOCUMENT_IDS + [""]), max_size=20),
    probes=st.lists(st.one_of(st.none(), st.sampled_from(QUERY_IDS + DOCUMENT_IDS + ["", "zz"]))),
    wide=st.booleans(),
)
def test_id_index_answers_as_index_in(
    members: list[str], probes: list[str | None], wide: bool
) -> None:
    ids = pa.array(members, pa.large_string() if wide else pa.string())
    looked_up = pa.array(probes, pa.string() if wide else pa.large_string())
    expected = pc.fill_null(pc.index_in(looked_up, value_set=ids), -1).to_pylist()
    index = IdIndex(ids)
    assert index.find(looked_up).tolist() == expected
    assert index.find(pa.chunked_array([looked_up[:3], looked_up[3:]])).tolist() == expected
    # A set of distinct IDs is looked up by hash; a repeat leaves it to index_in.
    assert index.hashed == (len(set(members)) == len(members))
