# Python cells -> Arrow buffers (src/rankgate/_cells.c); called only through rankgate.io.cells.
from typing import Any

def text_lists(
    cells: list[Any], /
) -> tuple[int, bytes, bytes | None, int, bytes, bytes, int] | None: ...
def grade_maps(
    cells: list[Any], /
) -> tuple[int, bytes, bytes | None, int, bytes, bytes, bytes, bytes | None, int] | None: ...
