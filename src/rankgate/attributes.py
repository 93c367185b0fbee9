"""What an evaluation keeps per scored query besides its values: its ID and its attributes (a
trace's other scalar fields), compactly or fetched on demand.

An evaluation keeps one float per query per metric; holding a dict of every trace's other fields as
well would cost more than all the metric values together (about 0.9 GB at a million traces). Queries
read on the columnar path therefore keep only where they came from: their attributes are read back
from the source the first time someone asks (``Evaluation.to_arrow``, a report's example queries),
one block at a time.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from rankgate.fast import text_array

__all__ = ["AttributeRows", "QueryIds", "scalar_fields"]

_SCALARS = (str, int, float, bool, type(None))

Row = dict[str, Any]
Loader = Callable[[], list[Row]]


def scalar_fields(attributes: dict[str, Any]) -> Row:
    """The fields a per-query table keeps: scalars only; nested values are left out."""
    return {key: value for key, value in attributes.items() if isinstance(value, _SCALARS)}


class AttributeRows(Sequence[Row]):
    """A sequence of attribute dicts, some held, some read back on first access (block by block)."""

    def __init__(self) -> None:
        self._blocks: list[list[Row] | Loader] = []
        self._sizes: list[int] = []
        self._starts: list[int] = []  # index of each block's first row
        self._length = 0

    def append(self, row: Row) -> None:
        last = self._blocks[-1] if self._blocks else None
        if isinstance(last, list):
            last.append(row)
            self._sizes[-1] += 1
        else:
            self._blocks.append([row])
            self._sizes.append(1)
            self._starts.append(self._length)
        self._length += 1

    def extend_later(self, count: int, loader: Loader) -> None:
        """``count`` rows that ``loader`` reads when they are first needed."""
        if count <= 0:
            return
        self._blocks.append(loader)
        self._sizes.append(count)
        self._starts.append(self._length)
        self._length += count

    def __len__(self) -> int:
        return self._length

    def _block(self, index: int) -> list[Row]:
        block = self._blocks[index]
        if callable(block):
            rows = block()
            if len(rows) != self._sizes[index]:
                raise RuntimeError("attributes read back do not match the rows scored")
            self._blocks[index] = block = rows
        return block

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Row]: ...
    def __getitem__(self, index: int | slice) -> Row | Sequence[Row]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("attribute row out of range")
        block = bisect.bisect_right(self._starts, index) - 1
        return self._block(block)[index - self._starts[block]]

    def __iter__(self) -> Iterator[Row]:
        for block in range(len(self._blocks)):
            yield from self._block(block)


class QueryIds(Sequence[str]):
    """The IDs of the scored queries, in input order: Python strings for records read one by one,
    Arrow string arrays for blocks read as columns (a few bytes per ID instead of a Python object).

    Compares equal to any sequence of the same strings, so ``evaluation.query_ids == ("q1", "q2")``
    reads as it would for a tuple.
    """

    __hash__ = None  # type: ignore[assignment]  # mutable while an evaluation runs

    def __init__(self) -> None:
        self._blocks: list[Any] = []  # list[str] or an Arrow string array
        self._starts: list[int] = []
        self._length = 0

    def append(self, query_id: str) -> None:
        last = self._blocks[-1] if self._blocks else None
        if isinstance(last, list):
            last.append(query_id)
        else:
            self._blocks.append([query_id])
            self._starts.append(self._length)
        self._length += 1

    def extend_arrow(self, ids: Any) -> None:
        """Append an Arrow string array without nulls."""
        import pyarrow as pa

        if len(ids):
            # Kept as 32-bit offsets (a chunk's IDs are far below 2 GiB): 4 bytes a query less
            # than the readers' large strings, 40 MB at ten million queries. ``to_arrow`` widens.
            if pa.types.is_large_string(ids.type) and ids.nbytes < 1 << 30:
                ids = ids.cast(pa.string())
            self._blocks.append(ids)
            self._starts.append(self._length)
            self._length += len(ids)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("query index out of range")
        block = bisect.bisect_right(self._starts, index) - 1
        value = self._blocks[block][index - self._starts[block]]
        return value if isinstance(value, str) else str(value.as_py())

    def __iter__(self) -> Iterator[str]:
        for block in self._blocks:
            yield from (block if isinstance(block, list) else block.to_pylist())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(other) == self._length and all(
            mine == theirs for mine, theirs in zip(self, other, strict=True)
        )

    def __repr__(self) -> str:
        shown = ", ".join(repr(q) for q in self[:3])
        return f"QueryIds([{shown}{', ...' if self._length > 3 else ''}], {self._length} IDs)"

    def to_arrow(self) -> Any:
        """The IDs as one Arrow string array."""
        import pyarrow as pa

        parts = [
            text_array(block) if isinstance(block, list) else block.cast(pa.large_string())
            for block in self._blocks
        ]
        if not parts:
            return pa.array([], type=pa.large_string())
        return pa.concat_arrays(parts)
