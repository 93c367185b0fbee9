"""Load on ``rankgate monitor`` from another process: sustained events per second and the server's
memory over time.

    python bench/monitor_load.py --seconds 30 --batch 500 --min-rate 5000

Starts the monitor on a free localhost port with a throwaway state file (every batch journaled
and fsync-ed before its 202, as in production), then sends seeded, labeled events as JSON Lines
batches over keep-alive connections from ``--clients`` threads for ``--seconds``, reading the
server's RSS and CPU time from /proc every second. The batches are generated before the clock
starts, so the figure is the server's, not the load generator's. Prints events/s, the server's
CPU time per event (the figure that does not depend on how busy the machine is) and RSS at the
start, middle and end, so a leak shows as a climb. With ``--min-rate``, exits 1 below that rate.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(match.group(1)) / 1024 if match else float("nan")


def batches(seed: int, size: int):
    rng = random.Random(seed)
    number = 0
    while True:
        lines = []
        for _ in range(size):
            number += 1
            docs = [f"d{rng.randrange(5000)}" for _ in range(20)]
            event = {
                "query_id": f"q{number}",
                "retrieved_ids": docs,
                "relevant_ids": rng.sample(docs, 2) if rng.random() < 0.8 else [],
                "query_type": rng.choice(["faq", "chat", "search"]),
                "variant": rng.choice(["a", "b"]),
            }
            lines.append(json.dumps(event))
        yield ("\n".join(lines) + "\n").encode()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--min-rate", type=float, default=0, help="exit 1 below this events/s")
    args = parser.parse_args()
    # Distinct bodies for a few seconds at the target rate, sent round and round.
    pool = max(4, int(20_000 / args.batch))
    prepared = [
        [body for body, _ in zip(batches(index, args.batch), range(pool), strict=False)]
        for index in range(args.clients)
    ]
    token = "bench-token-0123456789abcdef"
    folder = Path(tempfile.mkdtemp())
    (folder / "rankgate.toml").write_text(
        '[monitor]\nmetrics = ["mrr", "precision@5", "ndcg@10"]\nsegment_by = ["query_type"]\n'
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "rankgate", "monitor", "--port", "0", "--state",
         str(folder / "state.db")],
        cwd=folder, env={**os.environ, "RANKGATE_MONITOR_TOKEN": token},
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # The monitor may first name the rankgate.toml it applies; the address is on the line after.
    port = 0
    while server.stderr and not port:
        line = server.stderr.readline()
        if not line:
            raise SystemExit("the monitor exited before listening")
        found = re.search(r"listening on http://[^ ]+:(\d+) ", line)
        port = int(found.group(1)) if found else 0
    sent = [0] * args.clients
    stop = time.monotonic() + args.seconds

    def client(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"}
        for number in range(10**9):
            body = prepared[index][number % pool]
            if time.monotonic() >= stop:
                break
            connection.request("POST", "/v1/events", body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            if response.status not in (202, 400):
                raise SystemExit(f"status {response.status}")
            sent[index] += args.batch

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    cpu_before = cpu_seconds(server.pid)
    started = time.monotonic()
    for thread in threads:
        thread.start()
    memory = []
    while any(t.is_alive() for t in threads):
        memory.append((time.monotonic() - started, rss_mb(server.pid)))
        time.sleep(1)
    elapsed = time.monotonic() - started
    cpu = cpu_seconds(server.pid) - cpu_before
    server.terminate()
    server.wait(10)
    total = sum(sent)
    rate = total / elapsed
    print(f"{total:,} events in {elapsed:.1f} s: {rate:,.0f} events/s sustained")
    print(
        f"server CPU: {1e6 * cpu / max(total, 1):.0f} us per event ({total / max(cpu, 1e-9):,.0f} events per CPU-second)"
    )
    picks = [memory[0], memory[len(memory) // 2], memory[-1]] if memory else []
    print("server RSS: " + ", ".join(f"{t:.0f} s {m:.0f} MB" for t, m in picks))
    if rate < args.min_rate:
        raise SystemExit(f"below the target of {args.min_rate:,.0f} events/s")


if __name__ == "__main__":
    main()
