"""Document-level scoring when rankings and labels name different units (chunks and documents).

A RAG retriever often logs the chunks it returned (``doc42#c3``) while annotators judge whole
documents (``doc42``), or the reverse. Joined as they are, no retrieved ID meets a label and every
query scores 0; or three chunks of one relevant document count as three relevant hits. A
``DocIdMapping`` names each ID's document, and the functions here rewrite whole Arrow columns with
it before the join:

* ``map_rankings``: every retrieved ID becomes its document, and the ranking collapses to documents
  at the rank of each document's first chunk. Later chunks of a document already listed are removed
  and counted (``chunks_collapsed``); they are not duplicates of the trace. An ID repeated verbatim
  *is* a duplicate of the trace: it is kept (as its document) so the join drops and counts it as it
  would without a mapping.
* ``map_labels`` / ``map_label_table``: grades given per chunk aggregate to their document by the
  **highest grade** (a document is as relevant as its most relevant part). A label given to the
  document itself is one more grade of that document, so when a document has both a direct label
  and chunk labels the highest of them all wins.

Three ways to name a document (``parse_doc_id_option`` reads the command-line form, ``str`` gives
it back):

* a separator, ``--doc-id '#'``: the document is the part before the first ``#``;
* a regular expression with exactly one group, ``--doc-id 're:^(.*)#c\\d+$'``: the group is the
  document (RE2 syntax, searched anywhere in the ID unless anchored);
* a mapping file, ``--doc-id map:chunks.csv`` (CSV, TSV, JSON Lines or Parquet, columns
  ``chunk_id`` and ``doc_id``; ``map:chunks.csv,passage,document`` names other columns).

An ID the rule does not cover **stays itself**: no separator in it, the regex does not match (or its
group is empty), or the mapping file does not list it. So IDs that already are documents pass
through unchanged, and a document labeled directly keeps its label. The same holds when the part
before the separator would be empty (``#c3`` stays ``#c3``), since an empty ID is not a document.

Everything runs over whole Arrow columns (``pyarrow.compute`` for the mapping, numpy for the
collapse and the aggregation): no Python object per ID.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from rankgate.errors import ConfigError, InputError, Location, UsageError
from rankgate.fast import numpy_of
from rankgate.id_index import IdIndex

__all__ = [
    "DEFAULT_CHUNK_COLUMN",
    "DEFAULT_DOC_COLUMN",
    "DocIdMapping",
    "map_label_table",
    "map_labels",
    "map_rankings",
    "parse_doc_id_option",
]

DEFAULT_CHUNK_COLUMN = "chunk_id"
DEFAULT_DOC_COLUMN = "doc_id"
MappingKind = Literal["separator", "regex", "map"]

_REGEX_PREFIX = "re:"
_MAP_PREFIX = "map:"
_SEPARATOR_PREFIX = "sep:"
# The name the one group is given when the user left it unnamed (Arrow extracts named groups).
_GROUP_NAME = "document"
_MAP_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "json", ".ndjson": "json", ".json": "json"}
_MAP_FORMATS |= {".parquet": "parquet", ".pq": "parquet"}


@dataclass(frozen=True)
class DocIdMapping:
    """How a retrieved or labeled ID names its document.

    Build one with ``separator``, ``regex`` or ``from_file`` (or ``parse_doc_id_option``); the
    constructor checks the rule and raises a one-line ``ConfigError`` (bad separator or regex) or
    ``InputError`` (mapping file) naming ``where`` the rule came from.

    Attributes:
        kind: ``"separator"``, ``"regex"`` or ``"map"``.
        rule: the separator, the pattern as given, or the mapping file's path.
        chunk_column: the mapping file's column of chunk IDs.
        doc_column: the mapping file's column of document IDs.
    """

    kind: MappingKind
    rule: str
    chunk_column: str = DEFAULT_CHUNK_COLUMN
    doc_column: str = DEFAULT_DOC_COLUMN
    # Derived: the pattern Arrow runs (the group named), or the file's (chunk, document) columns.
    pattern: str = field(default="", compare=False, repr=False)
    group: str = field(default="", compare=False, repr=False)
    chunks: Any = field(default=None, compare=False, repr=False)
    documents: Any = field(default=None, compare=False, repr=False)
    #: The chunk IDs by hash, built once: every block of rankings and labels is looked up in it.
    chunk_index: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def separator(cls, text: str, *, where: str = "--doc-id") -> DocIdMapping:
        """The document is the part of an ID before the first ``text``."""
        if not isinstance(text, str) or not text:
            raise ConfigError(f"{where}: the separator is empty (e.g. '#' for doc42#c3)")
        return cls("separator", text)

    @classmethod
    def regex(cls, pattern: str, *, where: str = "--doc-id") -> DocIdMapping:
        """The document is what the pattern's one group matched (RE2 syntax, searched)."""
        arrow_pattern, group = _one_group_pattern(pattern, where)
        return cls("regex", pattern, pattern=arrow_pattern, group=group)

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        chunk_column: str = DEFAULT_CHUNK_COLUMN,
        doc_column: str = DEFAULT_DOC_COLUMN,
    ) -> DocIdMapping:
        """Chunk -> document pairs from a CSV, TSV, JSON Lines or Parquet file (gzip allowed)."""
        chunks, documents = _read_pairs(Path(path), chunk_column, doc_column)
        return cls(
            "map",
            str(path),
            chunk_column,
            doc_column,
            chunks=chunks,
            documents=documents,
            chunk_index=IdIndex(chunks),
        )

    def __str__(self) -> str:
        """The command-line form, which ``parse_doc_id_option`` reads back to an equal mapping."""
        if self.kind == "regex":
            return _REGEX_PREFIX + self.rule
        if self.kind == "map":
            columns = (self.chunk_column, self.doc_column)
            named = columns != (DEFAULT_CHUNK_COLUMN, DEFAULT_DOC_COLUMN)
            return _MAP_PREFIX + self.rule + (f",{columns[0]},{columns[1]}" if named else "")
        if self.rule.startswith((_REGEX_PREFIX, _MAP_PREFIX, _SEPARATOR_PREFIX)):
            return _SEPARATOR_PREFIX + self.rule
        return self.rule

    def documents_of(self, ids: Any) -> Any:
        """Each ID's document, as an Arrow array of the same type and length (nulls stay null)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ids = _array(ids)
        if self.kind == "separator":
            before = pc.list_element(pc.split_pattern(ids, pattern=self.rule, max_splits=1), 0)
            # No separator gives the whole ID back; an empty part before it is no document.
            return pc.if_else(pc.equal(before, _empty_like(ids)), ids, before)
        if self.kind == "regex":
            found = pc.extract_regex(ids, pattern=self.pattern)
            group = found.field(0)
            matched = pc.and_(pc.is_valid(found), pc.not_equal(group, _empty_like(ids)))
            return pc.if_else(pc.fill_null(matched, False), group.cast(ids.type), ids)
        if not len(ids):
            return pa.array([], ids.type)
        documents = self.documents.cast(ids.type)
        index = self.chunk_index if self.chunk_index is not None else IdIndex(self.chunks)
        rows = index.find(ids)
        return pc.coalesce(documents.take(pa.array(rows, mask=rows < 0)), ids)


def parse_doc_id_option(value: str, *, base: Path | None = None, where: str = "--doc-id") -> Any:
    """A ``DocIdMapping`` from the command-line value of ``--doc-id``.

    ``re:PATTERN`` is a regex with one group; ``map:PATH`` a mapping file with columns ``chunk_id``
    and ``doc_id``, ``map:PATH,CHUNK_COLUMN,DOC_COLUMN`` one with other columns; ``sep:TEXT`` or any
    other text a separator (``sep:`` is needed only for a separator that itself starts with
    ``re:``, ``map:`` or ``sep:``). A relative ``PATH`` is taken from ``base`` when given.
    """
    if not isinstance(value, str) or not value:
        raise ConfigError(
            f"{where}: expected a separator ('#'), 're:PATTERN' or 'map:FILE', got {value!r}"
        )
    if value.startswith(_REGEX_PREFIX):
        return DocIdMapping.regex(value[len(_REGEX_PREFIX) :], where=where)
    if value.startswith(_SEPARATOR_PREFIX):
        return DocIdMapping.separator(value[len(_SEPARATOR_PREFIX) :], where=where)
    if value.startswith(_MAP_PREFIX):
        text = value[len(_MAP_PREFIX) :]
        chunk_column, doc_column = DEFAULT_CHUNK_COLUMN, DEFAULT_DOC_COLUMN
        parts = text.rsplit(",", 2)
        if len(parts) == 3:
            text, chunk_column, doc_column = parts
            if not chunk_column or not doc_column:
                raise ConfigError(
                    f"{where}: expected map:FILE,CHUNK_COLUMN,DOC_COLUMN, got {value!r}"
                )
        if not text:
            raise ConfigError(f"{where}: map: names no file (e.g. map:chunks.csv)")
        path = Path(text)
        if base is not None and not path.is_absolute():
            path = base / path
        try:
            return DocIdMapping.from_file(path, chunk_column, doc_column)
        except InputError as problem:
            # The file's error names it (and the line); say which option pointed there, as
            # rankgate.toml's [ids] does.
            raise ConfigError(f"{problem} (from {where})") from None
    return DocIdMapping.separator(value, where=where)


# --------------------------------------------------------------------------------------------
# Rankings and labels


def map_rankings(retrieved: Any, mapping: DocIdMapping) -> tuple[Any, npt.NDArray[np.int64]]:
    """Rankings of documents from rankings of chunks, and how many chunks each row lost.

    Args:
        retrieved: a ``list<string>`` / ``large_list<large_string>`` Arrow array (binary IDs too).
        mapping: how an ID names its document.

    Returns:
        The mapped rankings (same type and length; a null row stays null) and, per row, the
        number of later chunks of an already listed document that were removed.

    Each document stays at the rank of its first chunk. An ID the ranking repeats verbatim is kept
    (as its document): it is the trace's own duplicate, which the join drops and counts.

    >>> import pyarrow as pa
    >>> ranked, collapsed = map_rankings(
    ...     pa.array([["d1#c1", "d2#c1", "d1#c2", "d3"]]), DocIdMapping.separator("#"))
    >>> ranked.to_pylist(), collapsed.tolist()
    ([['d1', 'd2', 'd3']], [1])
    """
    import pyarrow as pa

    retrieved = _array(retrieved)
    n = len(retrieved)
    offsets = numpy_of(retrieved.offsets).astype(np.int64, copy=False)
    start, end = int(offsets[0]), int(offsets[-1])
    ids = retrieved.values.slice(start, end - start)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    documents = mapping.documents_of(ids)
    document_codes, missing = _codes(documents)
    id_codes, _ = _codes(ids)
    first_document = _first_in_row(rows, document_codes)
    first_id = _first_in_row(rows, id_codes)
    # A null ID (its row goes to the validator) is never collapsed into another.
    keep = first_document | ~first_id | missing
    collapsed_at = ~keep
    chunks_collapsed = np.bincount(rows[collapsed_at], minlength=n).astype(np.int64)
    kept_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=kept_offsets[1:])
    kept = documents.filter(pa.array(keep))
    mask = retrieved.is_null() if retrieved.null_count else None
    if pa.types.is_large_list(retrieved.type):
        out = pa.LargeListArray.from_arrays(pa.array(kept_offsets), kept, mask=mask)
    else:
        out = pa.ListArray.from_arrays(pa.array(kept_offsets.astype(np.int32)), kept, mask=mask)
    return out.cast(retrieved.type), chunks_collapsed


def map_labels(grades: Any, mapping: DocIdMapping) -> Any:
    """Grades per document from grades per chunk (or per document), by the highest grade.

    Args:
        grades: a ``map<string, float64>`` Arrow array, one map per query (null: unlabeled).
        mapping: how an ID names its document.

    Returns:
        A map array of the same type and length: each document once, with the highest grade any
        of its IDs carried (a direct label of the document included), in the order documents first
        appear. A null grade makes its document's grade null (the row is the validator's anyway).

    >>> import pyarrow as pa
    >>> grades = pa.array([[("d1#c1", 0.0), ("d1#c2", 2.0), ("d2", 1.0)]],
    ...                   pa.map_(pa.string(), pa.float64()))
    >>> map_labels(grades, DocIdMapping.separator("#")).to_pylist()
    [[('d1', 2.0), ('d2', 1.0)]]
    """
    mapped, _ = _aggregate(_array(grades), None, mapping)
    return mapped


def map_label_table(table: Any, mapping: DocIdMapping) -> Any:
    """A label table as ``rankgate.labels.label_table`` makes it (``query_id``,
    ``relevance_scores`` and optionally ``labeled_at``), with its documents mapped.

    Grades aggregate as in ``map_labels``. A document's ``labeled_at`` is that of the judgment whose
    grade won; among equal grades, the most recent (an undated judgment counts as the oldest), so
    the stale-label filter ages a document by the judgment that decided its grade.
    """
    import pyarrow as pa

    names = table.schema.names
    for name in ("query_id", "relevance_scores"):
        if name not in names:
            raise UsageError(f"labels table: no '{name}' column (columns: {', '.join(names)})")
    scores = _array(table.column("relevance_scores"))
    stamps = _array(table.column("labeled_at")) if "labeled_at" in names else None
    mapped, mapped_stamps = _aggregate(scores, stamps, mapping)
    columns = {name: table.column(name) for name in names}
    columns["relevance_scores"] = mapped
    if mapped_stamps is not None:
        columns["labeled_at"] = mapped_stamps
    return pa.table(columns)


def _aggregate(grades: Any, stamps: Any, mapping: DocIdMapping) -> tuple[Any, Any]:
    """The grades (and, when given, their stamps, keyed alike) with each row's IDs mapped and
    merged by the highest grade."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n = len(grades)
    offsets = numpy_of(grades.offsets).astype(np.int64, copy=False)
    start, end = int(offsets[0]), int(offsets[-1])
    keys = grades.keys.slice(start, end - start)
    values = grades.items.slice(start, end - start)
    if stamps is not None:
        stamp_offsets = numpy_of(stamps.offsets).astype(np.int64, copy=False)
        stamp_keys = stamps.keys.slice(int(stamp_offsets[0]), end - start)
        if not (
            np.array_equal(stamp_offsets - stamp_offsets[0], offsets - start)
            and pc.all(pc.fill_null(pc.equal(stamp_keys, keys), True)).as_py() is not False
        ):
            raise UsageError(
                "labels table: labeled_at must list the same documents as relevance_scores"
            )
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    documents = mapping.documents_of(keys)
    codes, _ = _codes(documents)
    # Null grades become NaN so that np.maximum spreads them to their document's grade.
    grade_values = numpy_of(pc.fill_null(values, np.nan)).astype(np.float64, copy=False)
    group = rows * (int(codes.max()) + 2 if len(codes) else 1) + codes
    sort_keys: list[npt.NDArray[Any]] = []
    stamp_values = None
    if stamps is not None:
        stamp_values = stamps.items.slice(int(stamp_offsets[0]), end - start)
        as_ints = stamp_values.cast(pa.int64())
        oldest = np.iinfo(np.int64).min + 1
        ordinal = numpy_of(pc.fill_null(as_ints, oldest)).astype(np.int64, copy=False)
        sort_keys.append(-ordinal)  # the most recent first
    # The winner of each (row, document): the highest grade, then the most recent stamp; NaN first
    # among grades, so that a null grade is what the document gets.
    nan_first = np.where(np.isnan(grade_values), -np.inf, -grade_values)
    order = np.lexsort((*sort_keys, nan_first, group))
    sorted_groups = group[order]
    # No grades at all (every row slow or unlabeled) leaves no group to start.
    starts = np.flatnonzero(np.r_[len(order) > 0, sorted_groups[1:] != sorted_groups[:-1]])
    winners = order[starts]
    # Documents listed in the order each first appears in its row.
    first_at = np.minimum.reduceat(order, starts) if len(order) else order
    listed = np.argsort(first_at, kind="stable")
    winners = winners[listed]
    entries = first_at[listed]
    counts = np.bincount(rows[entries], minlength=n)
    new_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    take = pa.array(winners)
    mapped_keys = documents.take(pa.array(entries))
    mapped_values = values.take(take)
    mask = grades.is_null() if grades.null_count else None
    offsets_array = pa.array(new_offsets.astype(np.int32))
    mapped = pa.MapArray.from_arrays(offsets_array, mapped_keys, mapped_values, mask=mask)
    mapped_stamps = None
    if stamps is not None and stamp_values is not None:
        stamp_mask = stamps.is_null() if stamps.null_count else None
        mapped_stamps = pa.MapArray.from_arrays(
            offsets_array, mapped_keys, stamp_values.take(take), mask=stamp_mask
        ).cast(stamps.type)
    return mapped.cast(grades.type), mapped_stamps


def _first_in_row(rows: npt.NDArray[np.int64], codes: npt.NDArray[np.int64]) -> Any:
    """True at each code's first occurrence within its row."""
    first = np.zeros(len(codes), dtype=np.bool_)
    if len(codes):
        width = int(codes.max()) + 1
        _, at = np.unique(rows * width + codes, return_index=True)
        first[at] = True
    return first


def _codes(ids: Any) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """Dictionary codes of an ID array (equal IDs, equal codes) and where the IDs are null."""
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(ids).indices
    missing = np.zeros(len(ids), dtype=np.bool_)
    if encoded.null_count:
        missing = ~numpy_of(pc.is_valid(encoded))
        encoded = pc.fill_null(encoded, 0)
    return numpy_of(encoded).astype(np.int64), missing


def _array(column: Any) -> Any:
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks()
    return column


def _empty_like(ids: Any) -> Any:
    import pyarrow as pa

    return pa.scalar(
        b"" if pa.types.is_binary(ids.type) or pa.types.is_large_binary(ids.type) else "", ids.type
    )


# --------------------------------------------------------------------------------------------
# Checking a regex: exactly one capturing group, and RE2 must compile it


def _one_group_pattern(pattern: str, where: str) -> tuple[str, str]:
    """The pattern Arrow runs (its one group named) and the group's name; ``ConfigError`` unless
    the pattern compiles and has exactly one capturing group."""
    if not isinstance(pattern, str) or not pattern:
        raise ConfigError(f"{where}: the regex is empty (e.g. 're:^(.*)#c[0-9]+$')")
    _compile(pattern, pattern, where)
    groups = _capturing_groups(pattern)
    if len(groups) != 1:
        raise ConfigError(
            f"{where}: regex {pattern!r} has {len(groups)} capturing groups; it needs exactly one, "
            "the document (make others non-capturing: (?:...))"
        )
    at, name = groups[0]
    arrow_pattern = pattern
    if name is None:
        name = _GROUP_NAME
        arrow_pattern = f"{pattern[: at + 1]}?P<{name}>{pattern[at + 1 :]}"
    _compile(arrow_pattern, pattern, where, extract=True)
    return arrow_pattern, name


def _compile(pattern: str, written: str, where: str, *, extract: bool = False) -> None:
    """``ConfigError`` quoting the pattern as the user ``written`` it unless RE2 compiles it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    probe = pa.array([""], pa.large_string())
    try:
        if extract:
            pc.extract_regex(probe, pattern=pattern)
        else:
            pc.match_substring_regex(probe, pattern=pattern)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as problem:
        reason = str(problem).splitlines()[0] if str(problem) else "does not compile"
        reason = reason.removeprefix("Invalid regular expression: ")
        raise ConfigError(
            f"{where}: regex {written!r} is not valid RE2 syntax ({reason})"
        ) from None


def _capturing_groups(pattern: str) -> list[tuple[int, str | None]]:
    """Position of each capturing group's ``(`` and its name (None when unnamed). Escapes and
    character classes are skipped; ``(?P<n>`` and ``(?<n>`` capture, other ``(?`` forms do not."""
    groups: list[tuple[int, str | None]] = []
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        char = pattern[i]
        if char == "\\":
            if pattern.startswith("Q", i + 1):  # \Q...\E quotes everything up to \E
                end = pattern.find("\\E", i + 2)
                i = n if end < 0 else end + 2
                continue
            i += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
            i += 1
            continue
        if char == "[":
            in_class = True
            i += 1
            # A ']' first in a class (after an optional '^') is a literal.
            if pattern.startswith("^", i):
                i += 1
            if pattern.startswith("]", i):
                i += 1
            continue
        if char == "(":
            named = re.match(r"\?P?<([A-Za-z_][A-Za-z0-9_]*)>", pattern[i + 1 :])
            if named:
                groups.append((i, named.group(1)))
            elif not pattern.startswith("?", i + 1):
                groups.append((i, None))
        i += 1
    return groups


# --------------------------------------------------------------------------------------------
# Reading a mapping file


def _read_pairs(path: Path, chunk_column: str, doc_column: str) -> tuple[Any, Any]:
    """The (chunk ID, document ID) columns of a mapping file, as large strings, each chunk once.

    A missing column, a null or empty ID, or a chunk mapped to two different documents is an
    ``InputError`` naming the file, the line (row for Parquet) and the column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    form = _MAP_FORMATS.get(suffixes[-1] if suffixes else "")
    if form is None:
        raise InputError(
            str(path),
            None,
            "mapping file: cannot tell its format from the name "
            "(use .csv, .tsv, .jsonl or .parquet)",
        )
    if not path.exists():
        raise InputError(str(path), None, "no such mapping file")
    try:
        table = _read_table(path, form, (chunk_column, doc_column))
    except OSError as problem:
        raise InputError(
            str(path), None, f"cannot read mapping file ({problem.strerror or problem})"
        ) from None
    except (pa.ArrowException, ValueError, UnicodeError) as problem:
        reason = str(problem).splitlines()[0] if str(problem) else type(problem).__name__
        raise InputError(
            str(path), None, f"not a readable {form} mapping file ({reason})"
        ) from None
    header = 1 if form in ("csv", "tsv") else 0

    def where(row: int) -> Location:
        if form == "parquet":
            return Location(str(path), row=row + 1)
        return Location(str(path), line=row + 1 + header)

    columns = []
    for name in (chunk_column, doc_column):
        if table.schema.names.count(name) > 1:
            raise InputError(
                str(path), None, f"mapping file: column {name!r} appears more than once"
            )
        if name not in table.schema.names:
            found = ", ".join(table.schema.names) or "none"
            raise InputError(
                str(path), name, f"no such column in the mapping file (columns: {found})"
            )
        column = _array(table.column(name))
        try:
            column = column.cast(pa.large_string())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise InputError(str(path), name, f"expected text IDs, got {column.type}") from None
        bad = pc.fill_null(pc.equal(column, ""), True)
        if len(column) and pc.any(bad).as_py():
            row = int(np.flatnonzero(numpy_of(bad))[0])
            raise InputError(where(row), name, "empty or missing ID")
        columns.append(column)
    chunks, documents = columns
    codes, _ = _codes(chunks)
    _, first = np.unique(codes, return_index=True)
    # A chunk listed twice must name the same document both times.
    expected = documents.take(pa.array(first[np.searchsorted(np.unique(codes), codes)]))
    conflict = numpy_of(pc.not_equal(expected, documents))
    if conflict.any():
        row = int(np.flatnonzero(conflict)[0])
        chunk = chunks[row].as_py()
        raise InputError(
            where(row),
            doc_column,
            f"chunk {_clip(chunk)} maps to {_clip(documents[row].as_py())} here but to "
            f"{_clip(expected[row].as_py())} earlier",
        )
    keep = pa.array(np.sort(first))
    return chunks.take(keep), documents.take(keep)


def _read_table(path: Path, form: str, columns: tuple[str, str]) -> Any:
    """The mapping file as an Arrow table; a malformed row is an ``InputError`` naming its line."""
    import pyarrow as pa

    if form == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path)
    if form == "json":
        import pyarrow.json as pj

        try:
            return pj.read_json(path)
        except pa.ArrowInvalid:
            # Arrow's message counts rows, not lines; find the line the way a reader would.
            _raise_at_bad_json_line(path)
            raise
    import pyarrow.csv as pcsv

    bad: list[Any] = []

    def note(row: Any) -> str:
        bad.append(row)
        return "skip"

    def read(threads: bool) -> Any:
        return pcsv.read_csv(
            path,
            read_options=pcsv.ReadOptions(use_threads=threads),
            parse_options=pcsv.ParseOptions(
                delimiter="\t" if form == "tsv" else ",", invalid_row_handler=note
            ),
            # IDs stay text ("007" is not 7); an empty cell is an empty ID, reported as such.
            convert_options=pcsv.ConvertOptions(
                column_types={name: pa.string() for name in columns}, strings_can_be_null=False
            ),
        )

    table = read(True)
    if bad:
        # Only a single-threaded read knows a bad row's line number: read again to name it.
        bad.clear()
        read(False)
        row = bad[0]
        raise InputError(
            Location(str(path), line=row.number) if row.number else str(path),
            None,
            f"expected {row.expected_columns} columns, got {row.actual_columns} "
            f"({_clip(row.text)})",
        )
    return table


def _raise_at_bad_json_line(path: Path) -> None:
    """``InputError`` at the first line of a JSON Lines file that is not one JSON object."""
    import gzip
    import json

    opener: Any = gzip.open if path.suffix.lower() == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="surrogateescape") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                raise InputError(
                    Location(str(path), line=number),
                    None,
                    "not a JSON object (a mapping file in JSON has one object per line)",
                )


def _clip(value: Any, limit: int = 40) -> str:
    text = str(value)
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
