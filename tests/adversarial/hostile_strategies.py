"""Hypothesis strategies for hostile trace records, as JSON text, CSV cells, Parquet columns, TREC
lines and OTLP exports.

Most values are ordinary (a few shared document IDs, so rankings repeat IDs and labels hit them),
because a record that is wrong in one field only reaches deeper code than one that is wrong
everywhere. Around them: wrong types, empty and enormous IDs (past the 8 KiB bound), lone surrogates,
NUL, bidirectional controls, line separators inside strings, NaN and infinities, numbers past int64
and past Python's 4,300-digit parse limit, negative and enormous grades, nesting past the depth bound,
duplicate keys, and lines cut short, given a BOM, a CR, a NUL or bytes that are not UTF-8.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from adversarial_helpers import Pairs, Raw, deep_array, deep_object, encode
from hypothesis import strategies as st

COMMON_IDS = ["d1", "d2", "d3", "d4"]
HUGE_ID = "x" * (8 * 1024 + 1)

odd_strings = st.sampled_from(
    [
        "",
        " ",
        "\ud800",
        "a\udfffb",
        "\x00",
        "nul\x00inside",
        "\u202eevil",
        "line\u2028sep",
        "para\u2029sep",
        "\ufeffbom",
        "tab\there",
        "cr\rhere",
        "nl\nhere",
        "\U0001f600",
        "é",
        "'; DROP TABLE rankgate_traces; --",
        "<script>alert(1)</script>",
        HUGE_ID,
        "y" * 70_000,  # past the free-text bound
    ]
)

text_ids = st.one_of(st.sampled_from(COMMON_IDS), odd_strings, st.text(max_size=8))

wrong_scalars = st.sampled_from(
    [
        None,
        True,
        False,
        1.5,
        -0.0,
        Raw(b"NaN"),
        Raw(b"Infinity"),
        Raw(b"-Infinity"),
        Raw(b"1e400"),
        Raw(b"-1e400"),
        Raw(b"1" + b"0" * 5000),
        [],
        {},
        [[]],
    ]
)

ids = st.one_of(
    text_ids,
    text_ids,
    st.integers(min_value=-(2**70), max_value=2**70),
    wrong_scalars,
)

grades = st.one_of(
    st.integers(min_value=0, max_value=3),
    st.integers(min_value=0, max_value=3),
    st.integers(min_value=-5, max_value=-1),
    st.sampled_from([2**31, 2**53 + 1, 2**62, 2**63, 2**64, 10**30, 1000, 1001]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["2", "high", "", True, None, [1], {"g": 1}]),
    wrong_scalars,
)

nested = st.sampled_from([deep_array(65), deep_array(1_500), deep_array(100_000)])
nested_object = st.sampled_from([deep_object(65), deep_object(1_500)])


@st.composite
def rankings(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["list"] * 6 + ["wrong", "nested", "dupes", "empty", "text"]))
    if kind == "list":
        return draw(st.lists(ids, max_size=6))
    if kind == "wrong":
        return draw(wrong_scalars)
    if kind == "nested":
        return draw(nested)
    if kind == "dupes":
        return ["d1", "d1", "d2", "d1", "d2"]
    if kind == "empty":
        return []
    return "d1,d2"


@st.composite
def grade_maps(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["pairs"] * 5 + ["wrong", "nested", "list"]))
    if kind == "pairs":
        keys = st.one_of(st.sampled_from(COMMON_IDS), odd_strings)
        # Pairs, not a dict: the same document may be graded twice in one object.
        return Pairs(draw(st.lists(st.tuples(keys, grades), max_size=5)))
    if kind == "wrong":
        return draw(wrong_scalars)
    if kind == "nested":
        return Pairs([("d1", draw(nested_object))])
    return [1, 2]


@st.composite
def records(draw: st.DrawFn) -> Any:
    """One hostile trace record (a JSON object, sometimes not one)."""
    fields: list[tuple[str, Any]] = []
    if draw(st.integers(0, 9)):
        fields.append(("query_id", draw(st.one_of(text_ids, text_ids, ids))))
    if draw(st.integers(0, 9)):
        fields.append(("retrieved_ids", draw(rankings())))
    if draw(st.booleans()):
        fields.append(("relevant_ids", draw(st.one_of(st.lists(ids, max_size=4), rankings()))))
    if draw(st.booleans()):
        fields.append(("relevance_scores", draw(grade_maps())))
    if draw(st.booleans()):
        fields.append(
            ("query_type", draw(st.one_of(odd_strings, st.sampled_from(["a", "b"]), ids)))
        )
    if draw(st.integers(0, 5)) == 0 and fields:
        # A key given twice: which one a reader believes must not depend on the code path.
        fields.append((draw(st.sampled_from([k for k, _ in fields])), draw(rankings())))
    if draw(st.integers(0, 7)) == 0:
        fields = [("input", Pairs(fields))]
    shape = draw(st.sampled_from(["object"] * 12 + ["array", "number", "string", "null"]))
    if shape == "array":
        return [Pairs(fields)]
    if shape == "number":
        return 42
    if shape == "string":
        return "not a record"
    if shape == "null":
        return None
    return Pairs(fields)


def ordinary_record(index: int) -> dict[str, Any]:
    return {
        "query_id": f"q{index}",
        "retrieved_ids": ["d1", "d2", "d3"],
        "relevance_scores": {"d2": 2, "d4": 1},
        "query_type": "a",
    }


_BAD_UTF8 = [b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]


@st.composite
def json_lines(draw: st.DrawFn) -> bytes:
    """One line of a JSON Lines file (without its newline), never blank."""
    text = encode(draw(records()), ascii_only=draw(st.booleans()))
    mutation = draw(
        st.sampled_from(
            ["none"] * 6 + ["cut", "utf8", "bom", "crlf", "nul", "cr", "trailing", "ws"]
        )
    )
    if mutation == "cut" and len(text) > 1:
        text = text[: draw(st.integers(1, len(text) - 1))]
    elif mutation == "utf8":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(_BAD_UTF8)) + text[at:]
    elif mutation == "bom":
        text = b"\xef\xbb\xbf" + text
    elif mutation == "crlf":
        text += b"\r"  # with the newline after it: a CRLF line end
    elif mutation == "nul":
        at = draw(st.integers(0, len(text)))
        text = text[:at] + b"\x00" + text[at:]
    elif mutation == "cr":
        # A bare CR is JSON whitespace: the record must stay one record on one line.
        text = text[:1] + b"\r" + text[1:]
    elif mutation == "trailing":
        text += b" }garbage"
    elif mutation == "ws":
        text = b" \t" + text + b"\t "
    assert text.strip(), "a blank line is not a record"
    return text


@st.composite
def jsonl_files(draw: st.DrawFn) -> tuple[bytes, int]:
    """A JSON Lines file and how many records (non-blank lines) it holds."""
    lines = draw(st.lists(json_lines(), min_size=1, max_size=6))
    # At least one ordinary record, so a run segmented by query_type has a scored record with it.
    ordinary = [json.dumps(ordinary_record(i)).encode() for i in range(draw(st.integers(1, 3)))]
    every = ordinary + lines
    every = draw(st.permutations(every))
    body = b"\n".join(every)
    if draw(st.booleans()):
        body += b"\n"
    if draw(st.booleans()):
        body = b"\n\n" + body  # leading blank lines shift the line numbers, not the count
    return body, len(every)


@st.composite
def json_arrays(draw: st.DrawFn) -> tuple[bytes, int, bool]:
    """A JSON array file, its element count, and whether the text is a well-formed array."""
    elements = [encode(draw(records())) for _ in range(draw(st.integers(0, 5)))]
    elements += [json.dumps(ordinary_record(i)).encode() for i in range(draw(st.integers(0, 2)))]
    separator = draw(st.sampled_from([b",", b",\r\n", b" ,\n\t"]))
    body = b"[" + separator.join(elements) + b"]"
    intact = True
    damage = draw(st.sampled_from(["none"] * 4 + ["cut", "trailing-comma", "bom", "utf8"]))
    if damage == "cut" and len(body) > 2:
        body = body[: draw(st.integers(1, len(body) - 1))]
        intact = False
    elif damage == "trailing-comma":
        body = body[:-1] + b",]"
        intact = False
    elif damage == "bom":
        body = b"\xef\xbb\xbf" + body
    elif damage == "utf8":
        at = draw(st.integers(1, len(body)))
        body = body[:at] + b"\xff" + body[at:]
        intact = False
    return body, len(elements), intact


def gzip_bytes(body: bytes, damage: str) -> bytes:
    packed = gzip.compress(body)
    if damage == "truncated":
        return packed[: max(2, len(packed) // 2)]
    if damage == "flipped":
        middle = len(packed) // 2
        return packed[:middle] + bytes([packed[middle] ^ 0xFF]) + packed[middle + 1 :]
    if damage == "trailing-garbage":
        return packed + b"\x00garbage"
    return packed


# --- CSV ---------------------------------------------------------------------------------------

CSV_COLUMNS = ["query_id", "retrieved_ids", "relevant_ids", "relevance_scores", "query_type"]


@st.composite
def csv_cells(draw: st.DrawFn, column: str) -> bytes:
    if column == "retrieved_ids":
        value: Any = draw(rankings())
    elif column == "relevant_ids":
        value = draw(st.lists(ids, max_size=3))
    elif column == "relevance_scores":
        value = draw(grade_maps())
    else:
        value = draw(st.one_of(text_ids, ids))
    how = draw(st.sampled_from(["json"] * 4 + ["plain", "empty", "nul", "utf8"]))
    if how == "json":
        return encode(value, ascii_only=draw(st.booleans()))
    if how == "plain":
        return str(value).encode("utf-8", "surrogatepass")[:20_000]
    if how == "empty":
        return b""
    if how == "nul":
        return b"a\x00b"
    return b"\xff\xfe"


def _quoted(cell: bytes) -> bytes:
    return b'"' + cell.replace(b'"', b'""') + b'"'


@dataclass(frozen=True)
class CsvCase:
    body: bytes
    rows: int  # data rows written
    exact: bool  # every row cleanly delimited, so the reader must see exactly ``rows``
    duplicated: bool  # a column name twice in the header
    short_rows: int  # rows with fewer cells than the header


@st.composite
def csv_files(draw: st.DrawFn, delimiter: bytes = b",") -> CsvCase:
    """A CSV (or TSV) file with hostile cells, rows and header."""
    columns = draw(
        st.lists(st.sampled_from(CSV_COLUMNS), min_size=1, max_size=6).filter(
            lambda c: "retrieved_ids" in c
        )
    )
    newline = draw(st.sampled_from([b"\n", b"\r\n"]))
    lines = [delimiter.join(_quoted(c.encode()) for c in columns)]
    exact = True
    short_rows = 0
    count = draw(st.integers(0, 5))
    for _ in range(count):
        cells = [_quoted(draw(csv_cells(column))) for column in columns]
        shape = draw(st.sampled_from(["ok"] * 6 + ["short", "long", "newline-in-cell"]))
        if shape == "short" and len(cells) > 1:
            cells = cells[: draw(st.integers(1, len(cells) - 1))]
            # Never a row of empty cells only, which a reader may take for a blank line.
            cells[0] = _quoted(b"q-short")
            short_rows += 1
        elif shape == "long":
            cells.append(_quoted(b"extra"))
        elif shape == "newline-in-cell":
            cells[0] = _quoted(b"q\nwith newline")
        lines.append(delimiter.join(cells))
    body = newline.join(lines) + newline
    if draw(st.integers(0, 5)) == 0:
        body = b"\xef\xbb\xbf" + body
    if draw(st.integers(0, 6)) == 0:
        body += b'"an unclosed quote'
        exact = False
    duplicated = len(set(columns)) < len(columns)
    return CsvCase(body, count, exact, duplicated, short_rows)


# --- Parquet -----------------------------------------------------------------------------------

_ARROW_TEXT = st.one_of(
    st.sampled_from(COMMON_IDS),
    odd_strings.filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)),
)
_INT64 = st.one_of(
    st.integers(-3, 3), st.sampled_from([2**62, 2**63 - 1, -(2**63), 2**53 + 1, 1001])
)
_FLOAT = st.floats(allow_nan=True, allow_infinity=True)


def _values_for(kind: pa.DataType, depth: int = 0) -> st.SearchStrategy[Any]:
    """Python values pyarrow accepts for ``kind``, nulls included."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        leaf: st.SearchStrategy[Any] = _ARROW_TEXT
    elif pa.types.is_binary(kind):
        leaf = st.binary(max_size=6)
    elif pa.types.is_int64(kind):
        leaf = _INT64
    elif pa.types.is_float64(kind):
        leaf = _FLOAT
    elif pa.types.is_boolean(kind):
        leaf = st.booleans()
    elif pa.types.is_map(kind):
        leaf = st.lists(
            st.tuples(_values_for(kind.key_type, depth + 1).filter(lambda k: k is not None),
                      _values_for(kind.item_type, depth + 1)),
            max_size=4,
        )  # fmt: skip
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        leaf = st.lists(_values_for(kind.value_type, depth + 1), max_size=6)
    elif pa.types.is_struct(kind):
        leaf = st.fixed_dictionaries(
            {kind.field(i).name: _values_for(kind.field(i).type, depth + 1)
             for i in range(kind.num_fields)}
        )  # fmt: skip
    else:
        raise TypeError(kind)
    return st.one_of(st.none(), leaf, leaf, leaf)


PARQUET_TYPES: dict[str, list[pa.DataType | None]] = {
    "query_id": [
        pa.string(),
        pa.string(),
        pa.large_string(),
        pa.int64(),
        pa.binary(),
        pa.float64(),
        None,
    ],
    "retrieved_ids": [
        pa.list_(pa.string()),
        pa.list_(pa.string()),
        pa.large_list(pa.large_string()),
        pa.list_(pa.int64()),
        pa.list_(pa.float64()),
        pa.list_(pa.list_(pa.string())),
        pa.string(),
        pa.int64(),
        pa.list_(pa.binary()),
    ],
    "relevant_ids": [None, pa.list_(pa.string()), pa.list_(pa.int64()), pa.string()],
    "relevance_scores": [
        None,
        pa.map_(pa.string(), pa.int64()),
        pa.map_(pa.string(), pa.float64()),
        pa.map_(pa.string(), pa.string()),
        pa.map_(pa.int64(), pa.int64()),
        pa.struct([("d1", pa.int64()), ("d2", pa.float64())]),
        pa.string(),
        pa.list_(pa.int64()),
    ],
    "query_type": [None, pa.string(), pa.int64(), pa.list_(pa.string()), pa.bool_()],
}


def _invalid_utf8_strings(count: int) -> pa.Array:
    """A string column whose bytes are not UTF-8: pyarrow builds it from buffers unchecked, as a
    writer in another language may."""
    raw = pa.array([b"\xff\xfeq" if i % 2 else b"q\xc3" for i in range(count)], type=pa.binary())
    return raw.view(pa.string())


@st.composite
def parquet_tables(draw: st.DrawFn) -> pa.Table:
    rows = draw(st.integers(0, 5))
    columns: dict[str, pa.Array] = {}
    for name, kinds in PARQUET_TYPES.items():
        kind = draw(st.sampled_from(kinds))
        if kind is None:
            continue
        values = [draw(_values_for(kind)) for _ in range(rows)]
        if (
            name == "retrieved_ids"
            and kind == pa.list_(pa.string())
            and rows
            and draw(st.booleans())
        ):
            values[0] = ["d1", "d1", "d2", "d1"]  # duplicate IDs in one ranking
        columns[name] = pa.array(values, type=kind)
    if "query_id" in columns and rows and draw(st.integers(0, 4)) == 0:
        columns["query_id"] = _invalid_utf8_strings(rows)
    if rows and draw(st.integers(0, 3)) == 0:
        # A JSON text column with the hostile records' own text.
        text = [encode(draw(grade_maps())).decode("utf-8", "replace") for _ in range(rows)]
        columns["relevance_scores"] = pa.array(text, type=pa.string())
    return pa.table(columns) if columns else pa.table({"x": pa.array([], pa.int64())})


# --- TREC --------------------------------------------------------------------------------------

_TREC_TOKENS = st.one_of(
    st.sampled_from(["q1", "q2", "q3"]),
    st.sampled_from(COMMON_IDS),
    st.sampled_from(
        ["0", "1", "2", "-1", "2.7", "nan", "inf", "-inf", "1e400", "99999999999999999999",
         "abc", "", "Q0", "0x10", "1_000", HUGE_ID, "\x00", "é", "\u202e"]
    ),
)  # fmt: skip


@st.composite
def trec_lines(draw: st.DrawFn, columns: int) -> bytes:
    if draw(st.integers(0, 3)):
        if columns == 6:
            tokens = [
                draw(st.sampled_from(["q1", "q2", "q3"])), "Q0", draw(st.sampled_from(COMMON_IDS)),
                str(draw(st.integers(0, 10))), repr(draw(st.floats(-5, 5))), "run",
            ]  # fmt: skip
        else:
            tokens = [
                draw(st.sampled_from(["q1", "q2", "q3"])), "0",
                draw(st.sampled_from(COMMON_IDS)), str(draw(st.integers(0, 3))),
            ]  # fmt: skip
    else:
        width = draw(st.sampled_from([columns, columns, columns - 1, columns + 1, 1]))
        tokens = [draw(_TREC_TOKENS) for _ in range(width)]
    separator = draw(st.sampled_from([b" ", b"\t", b"  "]))
    line = separator.join(t.encode("utf-8", "surrogatepass") for t in tokens)
    ending = draw(st.sampled_from([b"", b"", b"\r", b" ", b"\xff"]))
    return line + ending


@st.composite
def trec_files(draw: st.DrawFn, columns: int) -> bytes:
    lines = draw(st.lists(trec_lines(columns), max_size=8))
    if draw(st.booleans()):
        lines.insert(0, b"")
    return b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")


# --- OTLP/JSON ---------------------------------------------------------------------------------


@st.composite
def otlp_values(draw: st.DrawFn) -> Any:
    kind = draw(
        st.sampled_from(
            ["string"] * 4 + ["int", "huge-int", "double", "bool", "array", "kvlist", "empty",
                              "null", "bare", "deep"]
        )
    )  # fmt: skip
    if kind == "string":
        return {"stringValue": draw(text_ids)}
    if kind == "int":
        return {"intValue": draw(st.sampled_from(["7", 7, "-1", "x", ""]))}
    if kind == "huge-int":
        return {"intValue": draw(st.sampled_from(["99999999999999999999999", Raw(b"1e400")]))}
    if kind == "double":
        return {"doubleValue": draw(st.one_of(_FLOAT, st.just("NaN")))}
    if kind == "bool":
        return {"boolValue": draw(st.sampled_from([True, "true", 1]))}
    if kind == "array":
        return {"arrayValue": {"values": [{"stringValue": "d1"}, {"intValue": "2"}]}}
    if kind == "kvlist":
        return {"kvlistValue": {"values": [{"key": "id", "value": {"stringValue": "d1"}}]}}
    if kind == "empty":
        return {}
    if kind == "null":
        return None
    if kind == "bare":
        return draw(text_ids)
    return Raw(b'{"arrayValue":{"values":[' * 1_500 + b"]}}" * 1_500)


def _attribute(key: Any, value: Any) -> Pairs:
    return Pairs([("key", key), ("value", value)])


@st.composite
def otlp_spans(draw: st.DrawFn, index: int) -> Pairs:
    attributes: list[Any] = []
    kind = draw(st.sampled_from(["RETRIEVER"] * 4 + ["RERANKER", "retriever", "", "LLM"]))
    attributes.append(_attribute("openinference.span.kind", {"stringValue": kind}))
    if draw(st.integers(0, 5)):
        qid = draw(st.one_of(st.just(f"q{index}"), text_ids))
        attributes.append(_attribute("query.id", {"stringValue": qid}))
    positions = draw(
        st.lists(
            st.one_of(st.integers(0, 4), st.sampled_from([-1, 99_999_999_999, 2**64, "x", ""])),
            max_size=5,
        )
    )
    for n in positions:
        value = draw(st.one_of(st.just({"stringValue": "d1"}), otlp_values()))
        attributes.append(_attribute(f"retrieval.documents.{n}.document.id", value))
    if draw(st.integers(0, 4)) == 0:
        docs = draw(st.sampled_from(['[{"id":"d1","score":1}]', "[{", '{"id":1}', "[" * 2000]))
        attributes.append(_attribute("gen_ai.operation.name", {"stringValue": "retrieval"}))
        attributes.append(_attribute("gen_ai.retrieval.documents", {"stringValue": docs}))
    if draw(st.integers(0, 4)) == 0:
        attributes.append(_attribute(draw(ids), draw(otlp_values())))
    fields: list[tuple[str, Any]] = [
        ("traceId", "0af7651916cd43dd8448eb211c80319c"),
        ("spanId", f"{index:016x}"),
        ("name", "retrieve"),
        ("startTimeUnixNano", draw(st.sampled_from(["1714564800000000000", "x", 1, None]))),
        ("endTimeUnixNano", "1714564801000000000"),
        ("attributes", attributes if draw(st.integers(0, 8)) else draw(wrong_scalars)),
    ]
    if draw(st.integers(0, 5)) == 0:
        fields.append(("droppedAttributesCount", draw(st.sampled_from([1, -1, "2", 2**64]))))
    return Pairs(fields)


@st.composite
def otlp_exports(draw: st.DrawFn) -> bytes:
    spans = [draw(otlp_spans(i)) for i in range(draw(st.integers(0, 4)))]
    scope: Any = Pairs([("scope", {"name": "x"}), ("spans", spans)])
    resource = {"attributes": [_attribute("service.name", draw(otlp_values()))]}
    body: Any = {"resourceSpans": [Pairs([("resource", resource), ("scopeSpans", [scope])])]}
    shape = draw(st.sampled_from(["ok"] * 5 + ["spans-not-list", "no-resource-spans", "array"]))
    if shape == "spans-not-list":
        body = {"resourceSpans": [{"scopeSpans": [{"spans": {"a": 1}}]}]}
    elif shape == "no-resource-spans":
        body = {"resourceSpans": None}
    elif shape == "array":
        body = [body]
    text = encode(body, ascii_only=draw(st.booleans()))
    if draw(st.integers(0, 6)) == 0:
        text = text[: draw(st.integers(1, len(text)))]
    return text
