"""What to judge next: the unjudged (query, document) pairs worth an annotator's time, in order.

Annotation is the scarce input of offline retrieval evaluation. TREC spends it by *pooling*: the
top ``depth`` documents of every system being compared are judged, and nothing else (Voorhees &
Harman, *TREC: Experiment and Evaluation in Information Retrieval*, 2005, ch. 2). Production has a
budget rather than a pool, so this module pools the same way and then orders the pool by what a
judgment buys:

1. **pairs that decide a label-limited cell of a comparison**: an unjudged document in one arm's
   top k and not in the other's, for a query of a cell whose verdict the missing labels decide
   (``compare_cells`` sets that status). Judging it moves one arm's score and not the other's, so
   it is the judgment that moves the delta;
2. then **by rank**: the weight of a pair is the sum, over the arms that rank it, of NDCG's
   discount ``1 / log2(rank + 1)``: a document at rank 1 moves every top-heavy metric more than one
   at rank 9;
3. then pairs of queries in **segments short of their minimums** (fewer labeled queries than the
   segment's ``min_queries``, or coverage under ``min_coverage``), whose gates cannot decide
   anything until they get labels.

Alternatively ``sample_queries`` picks *queries* instead: a stratified random sample per segment
(proportional allocation, seeded), every unjudged document of their pooled top ``depth``. Coverage
then grows on queries drawn at random, not on the ones a ranker happens to find easy, which keeps
the labeled set a fair sample of the traffic (the design note's "missing relevant_ids for new
queries" pitfall) and is what a later estimate that corrects model judgments with human ones
needs.

The sides are read through the pipeline every command shares (``compare_read``: one Arrow table
per side, labels joined by ``compare_labels``); with two or more sides the comparison itself comes
from ``compare``. The forecast (``TodoList``) says what the listed judgments buy: judged@k of
each side and of each label-limited cell before and after, assuming every listed pair gets a grade.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rankgate.compare import Comparison, Significance, Variant, compare
from rankgate.compare_labels import LabelBook
from rankgate.compare_read import RELEVANT, SCORES, NotArrowText, Reader, SideTable, source_name
from rankgate.errors import ConfigError, UsageError
from rankgate.evaluate import Settings
from rankgate.gates import DEFAULT_MIN_QUERIES, Gate, GatePolicy
from rankgate.segments import MISSING_VALUE, segment_fields_of
from rankgate.spec import MetricSpec
from rankgate.worst import QUERY_TEXT_FIELDS

__all__ = [
    "DEFAULT_DEPTH",
    "CellForecast",
    "SideForecast",
    "TodoList",
    "TodoPair",
    "labels_todo",
]

#: How deep each ranking is pooled by default: the cutoff of the metrics teams gate on most.
DEFAULT_DEPTH = 10
DECIDES = "decides a label-limited cell"
BY_RANK = "unjudged in the pooled top k"
SAMPLED = "sampled query"


@dataclass(frozen=True, slots=True)
class TodoPair:
    """One (query, document) pair to judge, with why and where it was ranked.

    ``ranks``: the document's 1-based rank per side that has it in its pooled top k (after later
    repeats are dropped, as scoring does). ``cells``: the label-limited cells it decides
    (``"candidate: metric (group)"``). ``weight``: the summed rank discount. ``short_segment``:
    whether its query is in a segment short of its minimums.
    """

    query_id: str
    document_id: str
    ranks: dict[str, int]
    reason: str
    weight: float
    cells: tuple[str, ...] = ()
    short_segment: bool = False
    query_text: str | None = None

    @property
    def rank(self) -> int:
        return min(self.ranks.values())

    def as_dict(self, priority: int) -> dict[str, Any]:
        """The record an annotator fills in: ``grade`` stays null until judged, and the filled
        file is a label file ``rankgate label import`` and ``--labels`` read as it is."""
        record: dict[str, Any] = {"query_id": self.query_id}
        if self.query_text is not None:
            record["query"] = self.query_text
        record |= {
            "document_id": self.document_id,
            "grade": None,
            "priority": priority,
            "rank": self.rank,
            "ranks": dict(self.ranks),
            "reason": self.reason,
        }
        if self.cells:
            record["cells"] = list(self.cells)
        return record


@dataclass(frozen=True, slots=True)
class SideForecast:
    """judged@``depth`` of one side over the queries labeled now, now and once the list is
    judged (``None`` when none is labeled), and over every query it holds; ``first_labels``:
    the unlabeled queries the list gives their first labels."""

    name: str
    queries: int
    labeled_queries: int
    judged_before: float | None
    judged_after: float | None
    all_judged_before: float
    all_judged_after: float
    first_labels: int = 0


@dataclass(frozen=True, slots=True)
class CellForecast:
    """A label-limited cell: judged@k of its arms over its queries, before and after, how many of
    the listed pairs it needs, and whether the list judges every unjudged document in both arms'
    top k (then the two readings of the unjudged documents coincide and the labels decide it)."""

    cell: str
    depth: int
    baseline_judged: tuple[float, float]
    candidate_judged: tuple[float, float]
    unjudged_pairs: int
    listed_pairs: int
    resolved: bool

    @property
    def gap_after(self) -> float:
        return self.baseline_judged[1] - self.candidate_judged[1]


@dataclass(frozen=True, eq=False)
class TodoList:
    """The pairs to judge, in order, and what judging them buys."""

    pairs: tuple[TodoPair, ...]
    pooled: int
    depth: int
    budget: int | None
    sides: tuple[SideForecast, ...]
    cells: tuple[CellForecast, ...]
    short_segments: tuple[str, ...]
    read: dict[str, int]
    invalid: dict[str, int]
    comparison: Comparison | None = None
    sampled_queries: tuple[str, ...] | None = None
    sample_strata: dict[str, int] = field(default_factory=dict)
    #: Sampled queries whose pairs are listed (under a budget, whole queries while they fit).
    sampled_listed: int = 0
    #: Listed pairs of queries whose trace records carry labels of their own: a ``--labels``
    #: file does not reach those (the records' own labels win), a store's labels table does.
    own_labels: int = 0
    seed: int = 0
    unjudged_tolerance: float = 0.0

    @property
    def decisive(self) -> int:
        return sum(1 for pair in self.pairs if pair.reason == DECIDES)

    def records(self) -> Iterable[dict[str, Any]]:
        for priority, pair in enumerate(self.pairs, start=1):
            record = pair.as_dict(priority)
            if self.sampled_queries is not None:
                record["sample"] = f"stratified random, seed {self.seed}"
            yield record


# --- reading -----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Query:
    """One query of one side: its deduplicated ranking to the pooled depth, the documents that
    carry a label, whether it has labels at all, its text and segment values."""

    top: list[str]
    judged: set[str]
    labeled: bool
    text: str | None
    segments: tuple[str, ...]
    #: Whether the trace record carries labels of its own, which a separate label file does not
    #: override (``evaluate``'s join fills in only traces without labels).
    own_labels: bool = False


@dataclass(slots=True)
class _Side:
    name: str
    queries: dict[str, _Query]


def _read_sides(*args: Any, **kwargs: Any) -> tuple[list[_Side], dict[str, int], dict[str, int]]:
    try:
        return _read_all_sides(*args, **kwargs)
    except NotArrowText:
        raise UsageError(
            "a trace holds text that is not valid Unicode (a lone surrogate, which a JSON escape "
            "can spell): labels todo cannot list its pairs; fix or skip that record"
        ) from None


def _read_all_sides(
    sources: Sequence[Any],
    *,
    variant_field: str | None,
    candidates: Sequence[str],
    labels: Any,
    labels_format: str | None,
    settings: Settings,
    input_format: str | None,
    segment_fields: Sequence[str],
    reach: int,
    progress: Callable[[str, int, int, int | None], None] | None,
) -> tuple[list[_Side], dict[str, int], dict[str, int]]:
    reader = Reader(settings, input_format, [*segment_fields, *QUERY_TEXT_FIELDS], progress)
    if variant_field is not None:
        tables = reader.split(sources[0], variant_field, list(candidates))
    else:
        named = [
            item if isinstance(item, Variant) else Variant(source_name(item, index), item)
            for index, item in enumerate(sources)
        ]
        tables = [reader.read(variant.data, variant.name) for variant in named]
    book = LabelBook(settings, None)
    if labels is not None:
        book.add_labels_source(labels, reader, labels_format)
    for table in tables:
        book.add_side(table)
    sides = [_side(table, book, settings, segment_fields, reach) for table in tables]
    read = {table.name: table.read for table in tables} | reader.extra_read
    invalid = {table.name: table.invalid for table in tables} | reader.extra_invalid
    return sides, read, invalid


def _side(
    table: SideTable, book: LabelBook, settings: Settings, segment_fields: Sequence[str], reach: int
) -> _Side:
    import pyarrow.compute as pc

    if table.streamed:
        raise UsageError(
            f"{table.name} is too large to hold its rankings in memory, which pooling needs; "
            "pool a sample of its queries (a store's --sample, or a window with --since/--until)"
        )
    rows = table.table
    relevant, scores, _ = book.labels_for(rows.column("query_id"), rows)
    # Only the top of each ranking matters; repeats are dropped before the cut, so keep a margin.
    retrieved = pc.list_slice(rows.column("retrieved_ids"), 0, 4 * reach)
    mapping = settings.doc_ids
    if mapping is not None:
        from rankgate.doc_ids import map_labels, map_rankings

        retrieved, _ = map_rankings(rows.column("retrieved_ids"), mapping)
        relevant, _ = map_rankings(relevant, mapping)
        scores = map_labels(scores, mapping)
    texts = _query_texts(table)
    own = (
        pc.or_(pc.is_valid(rows.column(RELEVANT)), pc.is_valid(rows.column(SCORES)))
        .to_numpy(zero_copy_only=False)
        .tolist()
    )
    segments = [table.attribute(name).to_pylist() for name in segment_fields]
    full = rows.column("retrieved_ids")
    queries: dict[str, _Query] = {}
    for row, (query_id, ranking, ids, grades) in enumerate(
        zip(
            rows.column("query_id").to_pylist(),
            retrieved.to_pylist(),
            relevant.to_pylist(),
            scores.to_pylist(),
            strict=True,
        )
    ):
        top = _deduplicated_top(ranking or [], reach)
        if len(top) < reach and mapping is None and len(ranking or ()) == 4 * reach:
            # So many repeats that the margin was not enough: take the whole ranking.
            top = _deduplicated_top(full[row].as_py() or [], reach)
        queries[query_id] = _Query(
            top=top,
            judged=set(ids or ()) | {doc for doc, _ in grades or ()},
            labeled=ids is not None or grades is not None,
            own_labels=bool(own[row]),
            text=texts[row],
            segments=tuple(
                MISSING_VALUE if column[row] is None else column[row] for column in segments
            ),
        )
    return _Side(table.name, queries)


def _query_texts(table: SideTable) -> list[str | None]:
    """Each row's query text from the first text field the traces carry."""
    found: list[str | None] = [None] * table.queries
    for name in QUERY_TEXT_FIELDS:
        column = table.attribute(name).to_pylist()
        found = [
            known if known is not None else text for known, text in zip(found, column, strict=True)
        ]
    return found


def _deduplicated_top(ranking: Sequence[str], depth: int) -> list[str]:
    top: list[str] = []
    seen: set[str] = set()
    for doc in ranking:
        if doc in seen:
            continue
        seen.add(doc)
        top.append(doc)
        if len(top) == depth:
            break
    return top


# --- the pool and its order --------------------------------------------------------------------


def _discount(rank: int) -> float:
    return 1.0 / math.log2(rank + 1)


@dataclass(slots=True)
class _Entry:
    query_id: str
    document_id: str
    order: int
    ranks: dict[str, int] = field(default_factory=dict)
    cells: list[str] = field(default_factory=list)
    text: str | None = None
    short: bool = False


def _pool(sides: Sequence[_Side], depth: int) -> dict[tuple[str, str], _Entry]:
    """Every unjudged document in the top ``depth`` of every side's rankings, each pair once."""
    pool: dict[tuple[str, str], _Entry] = {}
    for side in sides:
        for query_id, query in side.queries.items():
            for rank, doc in enumerate(query.top[:depth], start=1):
                if doc in query.judged:
                    continue
                entry = pool.get((query_id, doc))
                if entry is None:
                    entry = pool[(query_id, doc)] = _Entry(
                        query_id, doc, len(pool), text=query.text
                    )
                entry.ranks.setdefault(side.name, rank)
    return pool


def _cell_name(candidate: str, cell: Any) -> str:
    return f"{candidate}: {cell.metric} ({cell.group})"


def _decisive(
    comparison: Comparison, sides: Sequence[_Side], pool: dict[tuple[str, str], _Entry]
) -> list[tuple[str, Any, int, list[str], list[str]]]:
    """Mark the pairs that decide each label-limited cell (entering them in the pool when they
    lie below the pooled depth) and return, per cell, what the forecast needs."""
    baseline = sides[0]
    found = []
    for index, result in enumerate(comparison.results, start=1):
        candidate = sides[index]
        for cell in result.label_limited:
            assert cell.evidence is not None  # label-limited cells carry their evidence
            k = cell.evidence.depth
            name = _cell_name(result.name, cell)
            on_candidate = result.cell_queries(cell, "candidate")
            on_baseline = result.cell_queries(cell, "baseline")
            for side, other, queries in (
                (candidate, baseline, on_candidate),
                (baseline, candidate, on_baseline),
            ):
                for query_id in queries:
                    query = side.queries[query_id]
                    mine = query.top[:k]
                    theirs = other.queries.get(query_id)
                    shared = set(theirs.top[:k]) if theirs is not None else set()
                    for rank, doc in enumerate(mine, start=1):
                        if doc in query.judged or doc in shared:
                            continue
                        entry = pool.get((query_id, doc))
                        if entry is None:
                            entry = pool[(query_id, doc)] = _Entry(
                                query_id, doc, len(pool), text=query.text
                            )
                        entry.ranks.setdefault(side.name, rank)
                        if name not in entry.cells:
                            entry.cells.append(name)
            found.append((name, cell, k, on_baseline, on_candidate))
    return found


def _short_segments(
    side: _Side, segment_fields: Sequence[str], policy: GatePolicy
) -> set[tuple[int, str]]:
    """(field index, value) of every segment of ``side`` short of its ``min_queries`` (in labeled
    queries) or its coverage minimum (labeled share of its queries)."""
    rules = {(rule.key.field, rule.key.value): rule for rule in policy.rules}
    counts: dict[tuple[int, str], list[int]] = {}
    for query in side.queries.values():
        for index, value in enumerate(query.segments):
            tally = counts.setdefault((index, value), [0, 0])
            tally[0] += 1
            tally[1] += int(query.labeled)
    short = set()
    for (index, value), (total, labeled) in counts.items():
        rule = rules.get((segment_fields[index], value))
        min_queries = rule.min_queries if rule and rule.min_queries else policy.min_queries
        min_coverage = (
            rule.min_coverage if rule and rule.min_coverage is not None else policy.min_coverage
        )
        if labeled < (min_queries or DEFAULT_MIN_QUERIES) or (
            min_coverage is not None and labeled / total < min_coverage
        ):
            short.add((index, value))
    return short


# --- forecasts ---------------------------------------------------------------------------------


def _judged_share(
    side: _Side, queries: Iterable[str], k: int, listed: set[tuple[str, str]]
) -> tuple[float, float]:
    """Mean judged@k over ``queries`` now and once ``listed`` is judged (the metric's definition:
    labeled documents in the top k over the documents there)."""
    before = after = 0.0
    count = 0
    for query_id in queries:
        query = side.queries.get(query_id)
        if query is None:
            continue
        count += 1
        top = query.top[:k]
        if not top:
            continue
        judged = sum(1 for doc in top if doc in query.judged)
        added = sum(1 for doc in top if doc not in query.judged and (query_id, doc) in listed)
        before += judged / len(top)
        after += (judged + added) / len(top)
    return (before / count, after / count) if count else (0.0, 0.0)


def _side_forecast(side: _Side, depth: int, listed: set[tuple[str, str]]) -> SideForecast:
    labeled = [query_id for query_id, query in side.queries.items() if query.labeled]
    # A query with no labels yet gets its first ones when any of its pairs is judged.
    first_labels = sum(
        1
        for query_id, query in side.queries.items()
        if not query.labeled and any((query_id, doc) in listed for doc in query.top[:depth])
    )
    shares = _judged_share(side, labeled, depth, listed) if labeled else (None, None)
    every = _judged_share(side, side.queries, depth, listed)
    return SideForecast(
        side.name,
        len(side.queries),
        len(labeled),
        shares[0],
        shares[1],
        every[0],
        every[1],
        first_labels,
    )


def _cell_forecast(
    name: str,
    cell: Any,
    k: int,
    baseline: _Side,
    candidate: _Side,
    on_baseline: Sequence[str],
    on_candidate: Sequence[str],
    listed: set[tuple[str, str]],
) -> CellForecast:
    unjudged: set[tuple[str, str]] = set()
    for side, queries in ((baseline, on_baseline), (candidate, on_candidate)):
        for query_id in queries:
            query = side.queries[query_id]
            unjudged.update((query_id, doc) for doc in query.top[:k] if doc not in query.judged)
    return CellForecast(
        cell=name,
        depth=k,
        baseline_judged=_judged_share(baseline, on_baseline, k, listed),
        candidate_judged=_judged_share(candidate, on_candidate, k, listed),
        unjudged_pairs=len(unjudged),
        listed_pairs=len(unjudged & listed),
        resolved=unjudged <= listed,
    )


# --- sampling queries --------------------------------------------------------------------------


def _sample(side: _Side, wanted: int, seed: int) -> tuple[list[str], dict[str, int]]:
    """A stratified random sample of ``wanted`` queries of ``side``: strata are the combinations of
    segment values, each given its proportional share (largest remainders), at least one when
    there are fewer strata than queries wanted; uniform within a stratum."""
    strata: dict[tuple[str, ...], list[str]] = {}
    for query_id, query in side.queries.items():
        strata.setdefault(query.segments, []).append(query_id)
    total = len(side.queries)
    wanted = min(wanted, total)
    keys = list(strata)
    exact = np.array([wanted * len(strata[key]) / total for key in keys])
    shares = np.floor(exact).astype(np.int64)
    if wanted >= len(keys):
        shares = np.maximum(shares, 1)
    for index in np.argsort(-(exact - np.floor(exact)), kind="stable"):
        if shares.sum() >= wanted:
            break
        if shares[index] < len(strata[keys[index]]):
            shares[index] += 1
    while shares.sum() > wanted:  # the minimum of one took more than the remainders gave
        largest = int(np.argmax(shares))
        shares[largest] -= 1
    rng = np.random.default_rng(seed)
    chosen: list[str] = []
    counts: dict[str, int] = {}
    for key, share in zip(keys, shares, strict=True):
        members = strata[key]
        picked = rng.choice(len(members), size=int(share), replace=False)
        chosen.extend(members[i] for i in sorted(picked))
        counts[" / ".join(key) if key else "all queries"] = int(share)
    order = rng.permutation(len(chosen))
    return [chosen[i] for i in order], counts


# --- the whole -----------------------------------------------------------------------------------


def labels_todo(
    *sources: Any,
    labels: Any = None,
    labels_format: str | None = None,
    variant_field: str | None = None,
    input_format: str | None = None,
    metrics: Iterable[str | MetricSpec] | None = None,
    gates: Sequence[Gate | str] = (),
    settings: Settings | None = None,
    policy: GatePolicy | None = None,
    significance: Significance | None = None,
    pairing: str = "paired",
    depth: int = DEFAULT_DEPTH,
    budget: int | None = None,
    sample_queries: int | None = None,
    progress: Callable[[str, int, int, int | None], None] | None = None,
) -> TodoList:
    """Pool the unjudged pairs of ``sources`` and order them by what judging them buys.

    Args:
        sources: one or more trace sources as ``evaluate`` reads them (paths, store sources,
            tables, ``Variant``). With two or more (or ``variant_field``) the first is the
            baseline of a comparison (``compare``'s arguments), whose label-limited cells
            decide the first pairs. With ``variant_field`` the first source holds every variant
            and the rest name the variants (baseline first); none named means every variant.
        labels, labels_format, metrics, gates, settings, policy, significance, pairing: as for
            ``compare``.
        depth: how much of each ranking is pooled (the decisive pairs of a cell are taken to
            the cell's own depth).
        budget: list at most this many pairs (all of them when None).
        sample_queries: instead of ordering the pool, list the unjudged pairs of a stratified
            random sample of this many queries of the first side (strata: the segment fields;
            seed: ``settings.seed``). With ``budget``, whole queries only.

    Raises:
        UsageError: a side too large to hold in memory, a label filter, standard input as one
            of several sides, or bad numbers.
    """
    settings = settings or Settings()
    policy = policy or GatePolicy()
    significance = significance or Significance()
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ConfigError(f"depth must be a whole number >= 1, got {depth!r}")
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, int) or budget < 1
    ):
        raise ConfigError(f"budget must be a whole number >= 1, got {budget!r}")
    if sample_queries is not None and (
        isinstance(sample_queries, bool)
        or not isinstance(sample_queries, int)
        or sample_queries < 1
    ):
        raise ConfigError(f"sample_queries must be a whole number >= 1, got {sample_queries!r}")
    if not sources:
        raise UsageError("labels todo needs at least one trace source")
    from rankgate.baseline import is_saved_baseline

    if any(is_saved_baseline(item) for item in sources):
        raise UsageError(
            "a saved baseline (*.rgb) holds values, not rankings, and pooling needs rankings: "
            "name the baseline's traces instead"
        )
    if settings.label_filter.active:
        raise UsageError(
            "labels todo does not go with a label filter (--corpus, --max-label-age): the labels "
            "it removes are removed inside the evaluation, so their pairs could not be listed"
        )
    if variant_field is not None:
        comparing = True
        data, *named = sources
        baseline_value = named[0] if named else None
        if baseline_value is None:
            raise UsageError(f"with variant field {variant_field!r}, name the baseline's value")
    else:
        comparing = len(sources) > 1
        if comparing and any(str(item) == "-" for item in sources):
            raise UsageError(
                "standard input can be read once; give every side of a comparison as a file"
            )
    segment_fields = segment_fields_of(settings, policy)

    comparison = None
    cell_depth = depth
    if comparing:
        comparison = compare(
            *sources,
            metrics=metrics,
            gates=gates,
            settings=settings,
            policy=policy,
            significance=significance,
            labels=labels,
            labels_format=labels_format,
            variant_field=variant_field,
            input_format=input_format,
            pairing=pairing,
            progress=progress,
        )
        cell_depth = max(
            [depth]
            + [
                cell.evidence.depth
                for result in comparison.results
                for cell in result.label_limited
                if cell.evidence is not None
            ]
        )
    if variant_field is not None:
        assert comparison is not None
        wanted = [comparison.baseline, *(result.name for result in comparison.results)]
        sides, read, invalid = _read_sides(
            [data],
            variant_field=variant_field,
            candidates=wanted,
            labels=labels,
            labels_format=labels_format,
            settings=settings,
            input_format=input_format,
            segment_fields=segment_fields,
            reach=cell_depth,
            progress=None,
        )
    else:
        sides, read, invalid = _read_sides(
            sources,
            variant_field=None,
            candidates=(),
            labels=labels,
            labels_format=labels_format,
            settings=settings,
            input_format=input_format,
            segment_fields=segment_fields,
            reach=cell_depth,
            progress=None if comparing else progress,
        )
    if comparison is not None:
        read, invalid = comparison.read, comparison.invalid

    pool = _pool(sides, depth)
    cells = _decisive(comparison, sides, pool) if comparison is not None else []
    short = _short_segments(sides[0], segment_fields, policy)
    for entry in pool.values():
        for side in sides:
            query = side.queries.get(entry.query_id)
            if query is not None and any(
                (index, value) in short for index, value in enumerate(query.segments)
            ):
                entry.short = True
                break

    sampled: list[str] | None = None
    strata: dict[str, int] = {}
    sampled_taken = 0
    if sample_queries is not None:
        sampled, strata = _sample(sides[0], sample_queries, settings.seed)
        chosen, sampled_taken = _sampled_pairs(sampled, sides, depth, budget)
    else:
        ordered = sorted(
            pool.values(),
            key=lambda entry: (not entry.cells, -_weight(entry), not entry.short, entry.order),
        )
        chosen = [_pair(entry) for entry in ordered[:budget]]

    listed = {(pair.query_id, pair.document_id) for pair in chosen}
    with_own = {
        query_id for side in sides for query_id, query in side.queries.items() if query.own_labels
    }
    own_labels = sum(1 for pair in chosen if pair.query_id in with_own)
    forecasts = tuple(
        _cell_forecast(name, cell, k, sides[0], sides[index], on_baseline, on_candidate, listed)
        for index, (name, cell, k, on_baseline, on_candidate) in _with_side_index(cells, comparison)
    )
    return TodoList(
        pairs=tuple(chosen),
        pooled=len(pool),
        depth=depth,
        budget=budget,
        sides=tuple(_side_forecast(side, depth, listed) for side in sides),
        cells=forecasts,
        short_segments=tuple(sorted(f"{segment_fields[index]}={value}" for index, value in short)),
        read=read,
        invalid=invalid,
        comparison=comparison,
        sampled_queries=None if sampled is None else tuple(sampled),
        sample_strata=strata,
        sampled_listed=sampled_taken,
        own_labels=own_labels,
        seed=settings.seed,
        unjudged_tolerance=significance.unjudged_tolerance,
    )


def _weight(entry: _Entry) -> float:
    return sum(_discount(rank) for rank in entry.ranks.values())


def _pair(entry: _Entry, reason: str | None = None) -> TodoPair:
    return TodoPair(
        query_id=entry.query_id,
        document_id=entry.document_id,
        ranks=dict(entry.ranks),
        reason=reason or (DECIDES if entry.cells else BY_RANK),
        weight=_weight(entry),
        cells=tuple(entry.cells),
        short_segment=entry.short,
        query_text=entry.text,
    )


def _sampled_pairs(
    sampled: Sequence[str], sides: Sequence[_Side], depth: int, budget: int | None
) -> tuple[list[TodoPair], int]:
    """The unjudged pairs of the sampled queries in sample order, each query's by rank; under a
    budget, whole queries while they fit. Also how many sampled queries were taken."""
    chosen: list[TodoPair] = []
    taken = 0
    for query_id in sampled:
        pool = _pool(
            [
                _Side(side.name, {query_id: side.queries[query_id]})
                for side in sides
                if query_id in side.queries
            ],
            depth,
        )
        pairs = [
            _pair(entry, SAMPLED)
            for entry in sorted(pool.values(), key=lambda e: (-_weight(e), e.order))
        ]
        if budget is not None and len(chosen) + len(pairs) > budget:
            break
        chosen.extend(pairs)
        taken += 1
    return chosen, taken


def _with_side_index(
    cells: Sequence[tuple[str, Any, int, list[str], list[str]]], comparison: Comparison | None
) -> Iterable[tuple[int, tuple[str, Any, int, list[str], list[str]]]]:
    """Each label-limited cell with the index of its candidate's side."""
    if comparison is None:
        return
    index_of = {result.name: index for index, result in enumerate(comparison.results, start=1)}
    for item in cells:
        yield index_of[item[1].candidate], item
