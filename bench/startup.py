"""Start-up cost: `rankgate eval` on a 10-line trace file, in a fresh process each time.

CI jobs often score a handful of traces, so the fixed cost of starting matters as much there as
throughput does on a nightly million. Prints the fastest and the median of several runs, with a bare
`python -c pass` and `python -c "import pyarrow"` measured the same way for scale.

    python bench/startup.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _records(count: int) -> str:
    lines = []
    for i in range(count):
        record = {
            "query_id": f"q{i}",
            "retrieved_ids": [f"d{j}" for j in range(20)],
            "relevance_scores": {f"d{(i + j) % 30}": j % 4 for j in range(5)},
        }
        lines.append(json.dumps(record))
    return "\n".join(lines) + "\n"


def _timed(command: list[str], runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    # rankgate's bytecode written first, as a wheel's install leaves it (see
    # throughput.compile_rankgate): an editable install under PYTHONDONTWRITEBYTECODE compiles
    # every module again on every start.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import throughput

    throughput.compile_rankgate()
    with tempfile.TemporaryDirectory() as folder:
        traces = Path(folder) / "ten.jsonl"
        traces.write_text(_records(10))
        rankgate = [sys.executable, "-m", "rankgate", "eval", str(traces), "--no-config"]
        rows = [
            ("python -c pass", _timed([sys.executable, "-c", "pass"], args.runs)),
            (
                "python -c 'import pyarrow'",
                _timed([sys.executable, "-c", "import pyarrow"], args.runs),
            ),
            ("rankgate eval (10 traces)", _timed(rankgate, args.runs)),
        ]
    print(f"| start-up, {args.runs} runs | fastest (s) | median (s) |")
    print("|---|--:|--:|")
    for name, seconds in rows:
        print(f"| {name} | {min(seconds):.2f} | {statistics.median(seconds):.2f} |")


if __name__ == "__main__":
    main()
