"""What handing a task record from one process to another costs, by mechanism.

A measurement for the design question "would splitting the agent into two processes
(intake + durable insert + 202 in one, placement + run + finish in the other) reach
3,000 tasks/s on 2 cores?" (docs/performance.md, "What 3,000 tasks/s would take"). The
record is what such a split would pass: a task id, its idempotency key and request hash,
its submission time, and the contract's stored JSON (``TaskContract.to_json`` of the
benchmarks' tiny task, about 410 bytes), about 560 bytes in all.

A producer process emits ``--records`` records at ``--rate`` records a second (the target
rate; records are created on a fixed schedule, so a record that waits for its group of
``k`` to fill is charged that wait), and a consumer process receives and decodes each one
(``json.loads``). Mechanisms:

- ``pipe``: ``multiprocessing.connection.Pipe``, one ``send_bytes`` per record;
- ``unix-kN``: a Unix stream socket pair, ``N`` records per length-prefixed frame;
- ``sqlite-kN-pM``: the producer inserts the records in transactions of ``N`` into a WAL
  file (``synchronous = FULL``, the agent's level), the consumer polls
  ``rowid > last`` from its own connection every ``M`` ms (``-w``: and marks what it read
  in its own transaction, as a second process recording placements in the same file
  would; the producer's commit times then show the two writers' lock);
- ``sqlite-kN-alone``: the same inserts with no consumer: the durable insert the intake
  pays anyway, so the handoff's share of the producer is the difference;
- ``none-kN``: the producer's schedule alone (sleeps, records built, nothing sent): the
  pacing's own CPU, to subtract from the producers' figures.

Mechanisms run in alternating rounds (``--rounds``), so that a busy box weighs on all of
them alike. Per record: CPU µs in the producer and in the consumer (``time.process_time``
of each process over the run), and latency from the record's scheduled creation to its
decode in the consumer (p50/p99 with the sample count). Also printed: a ``json.loads`` of
one record and ``TaskContract.from_dict`` of its contract (the consumer's re-parse if it
needs the contract object, not only the bytes). The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import sqlite3
import statistics
import struct
import tempfile
import time
import timeit
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from edge_agent.tasks.contract import TaskContract

TASK = {"semantics": {"gflops": 0.001}, "task_class": "bench"}  # the benchmarks' FAST_TASK
CONTRACT_JSON = TaskContract.from_dict(TASK).to_json()
FRAME = struct.Struct("!I")
DONE = b""  # an empty record ends a run


def record(i: int, created: float) -> bytes:
    """Return the ``i``-th record: what an intake process would hand on after its commit."""
    return (
        f'{{"id":"t-{i:012d}","idempotency_key":"k-{i:012d}",'
        f'"request_hash":"{i:064x}","submitted_at":{created!r},'
        f'"contract":{CONTRACT_JSON}}}'
    ).encode()


def schedule(n: int, rate: float, k: int) -> Callable[[int], float]:
    """Return ``wait(i)``: sleep until record ``i``'s group of ``k`` is complete."""
    start = time.perf_counter() + 0.05

    def wait(i: int) -> float:
        due = start + (i + k - 1) / rate  # the group leaves when its last record exists
        delay = due - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        return start + i / rate

    return wait


def _cpu(out: Connection, body: Callable[[], list[float]]) -> None:
    t0 = time.process_time()
    lat = body()
    out.send((time.process_time() - t0, lat))


# --- producers ----------------------------------------------------------------------------


def produce_none(out: Connection, n: int, rate: float, k: int) -> None:
    """The schedule alone (its sleeps and records, nothing sent): the producers' baseline."""

    def body() -> list[float]:
        wait = schedule(n, rate, k)
        for i in range(0, n, k):
            created = wait(i)
            [record(j, created + (j - i) / rate) for j in range(i, min(i + k, n))]
        return []

    _cpu(out, body)


def produce_pipe(out: Connection, tx: Connection, n: int, rate: float) -> None:
    def body() -> list[float]:
        wait = schedule(n, rate, 1)
        for i in range(n):
            tx.send_bytes(record(i, wait(i)))
        tx.send_bytes(DONE)
        return []

    _cpu(out, body)


def produce_unix(out: Connection, sock: socket.socket, n: int, rate: float, k: int) -> None:
    def body() -> list[float]:
        wait = schedule(n, rate, k)
        for i in range(0, n, k):
            created = wait(i)
            recs = [record(j, created + (j - i) / rate) for j in range(i, min(i + k, n))]
            sock.sendall(b"".join(FRAME.pack(len(r)) + r for r in recs))
        sock.sendall(FRAME.pack(0))
        return []

    _cpu(out, body)


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def produce_sqlite(out: Connection, path: Path, n: int, rate: float, k: int) -> None:
    def body() -> list[float]:
        conn = connect(path)
        wait = schedule(n, rate, k)
        commits = []  # wall seconds of each group's transaction (a second writer stalls it)
        for i in range(0, n, k):
            created = wait(i)
            rows = [(record(j, created + (j - i) / rate),) for j in range(i, min(i + k, n))]
            began = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO handoff (body) VALUES (?)", rows)
            conn.execute("COMMIT")
            commits.append(time.perf_counter() - began)
        conn.close()
        return commits

    _cpu(out, body)


# --- consumers ----------------------------------------------------------------------------


def consume_pipe(out: Connection, rx: Connection) -> None:
    def body() -> list[float]:
        lat = []
        while (data := rx.recv_bytes()) != DONE:
            now = time.perf_counter()
            lat.append(now - json.loads(data)["submitted_at"])
        return lat

    _cpu(out, body)


def consume_unix(out: Connection, sock: socket.socket) -> None:
    def body() -> list[float]:
        lat: list[float] = []
        buf = b""
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return lat
            buf += chunk
            now = time.perf_counter()
            at = 0
            while len(buf) - at >= FRAME.size:
                (size,) = FRAME.unpack_from(buf, at)
                if size == 0:
                    return lat
                if len(buf) - at - FRAME.size < size:
                    break
                doc = json.loads(buf[at + FRAME.size : at + FRAME.size + size])
                lat.append(now - doc["submitted_at"])
                at += FRAME.size + size
            buf = buf[at:]

    _cpu(out, body)


def consume_sqlite(out: Connection, path: Path, n: int, poll_ms: float, write: bool) -> None:
    """Poll ``rowid > last``; with ``write``, also mark what was read (a second writer)."""

    def body() -> list[float]:
        conn = connect(path)
        lat: list[float] = []
        last = 0
        while len(lat) < n:
            rows = conn.execute(
                "SELECT rowid, body FROM handoff WHERE rowid > ? ORDER BY rowid", (last,)
            ).fetchall()
            now = time.perf_counter()
            for _, data in rows:
                lat.append(now - json.loads(data)["submitted_at"])
            if rows and write:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(
                    "UPDATE handoff SET state = 1 WHERE rowid > ? AND rowid <= ?",
                    (last, rows[-1][0]),
                )
                conn.execute("COMMIT")
            if rows:
                last = rows[-1][0]
            else:
                time.sleep(poll_ms / 1000)
        conn.close()
        return lat

    _cpu(out, body)


# --- one trial ----------------------------------------------------------------------------


def trial(mechanism: str, n: int, rate: float, tmp: Path) -> dict[str, Any]:
    """Run one mechanism once; return its CPU per record on each side and its latencies."""
    ctx = mp.get_context("fork")
    kind, *params = mechanism.split("-")
    k = int(params[0][1:]) if params else 1
    results: list[Connection] = []
    procs: list[Any] = []

    def start(target: Callable[..., None], *args: Any) -> None:
        rx, tx = ctx.Pipe(duplex=False)
        procs.append(ctx.Process(target=target, args=(tx, *args)))
        results.append(rx)

    if kind == "none":
        start(produce_none, n, rate, k)
    elif kind == "pipe":
        r, w = ctx.Pipe(duplex=False)
        start(produce_pipe, w, n, rate)
        start(consume_pipe, r)
    elif kind == "unix":
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        start(produce_unix, a, n, rate, k)
        start(consume_unix, b)
    else:
        path = tmp / f"{mechanism}-{time.monotonic_ns()}.db"
        conn = connect(path)
        conn.execute("CREATE TABLE handoff (body BLOB NOT NULL, state INTEGER DEFAULT 0)")
        conn.close()
        start(produce_sqlite, path, n, rate, k)
        if params[1] != "alone":
            start(consume_sqlite, path, n, float(params[1][1:]), params[-1] == "w")
    for p in procs:
        p.start()
    got = [c.recv() for c in results]
    for p in procs:
        p.join()
    producer_cpu, commits = got[0]
    consumer_cpu, lat = got[1] if len(got) > 1 else (0.0, [])
    return {
        "producer_s": producer_cpu,
        "consumer_s": consumer_cpu,
        "latencies": lat,
        "commits": commits,
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def decode_costs() -> dict[str, float]:
    """Return µs for a ``json.loads`` of one record and a ``TaskContract.from_dict``."""
    data = record(1, time.perf_counter())
    contract = json.loads(CONTRACT_JSON)
    loops = 20_000
    loads = min(timeit.repeat(lambda: json.loads(data), number=loops, repeat=3)) / loops
    parse = (
        min(timeit.repeat(lambda: TaskContract.from_dict(contract), number=loops, repeat=3)) / loops
    )
    return {"json_loads_us": loads * 1e6, "contract_from_dict_us": parse * 1e6}


MECHANISMS = (
    "none-k1",
    "none-k32",
    "pipe",
    "unix-k1",
    "unix-k8",
    "unix-k32",
    "sqlite-k8-alone",
    "sqlite-k8-p1",
    "sqlite-k32-alone",
    "sqlite-k32-p1",
    "sqlite-k32-p5",
    "sqlite-k32-p1-w",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=3000.0, help="records a second")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mechanisms", default=",".join(MECHANISMS))
    args = parser.parse_args()
    mechanisms = args.mechanisms.split(",")
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in mechanisms}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = mechanisms if r % 2 == 0 else mechanisms[::-1]
            for m in order:
                runs[m].append(trial(m, args.records, args.rate, Path(tmp)))
    n = args.records
    summary: dict[str, Any] = {
        "record_bytes": len(record(0, time.perf_counter())),
        "records": n,
        "rate": args.rate,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        **{k: round(v, 2) for k, v in decode_costs().items()},
        "mechanisms": {},
    }
    print(
        f"record {summary['record_bytes']} bytes, {n} records at {args.rate:g}/s, "
        f"{args.rounds} rounds alternating"
    )
    print(
        f"json.loads of a record {summary['json_loads_us']} us; "
        f"TaskContract.from_dict {summary['contract_from_dict_us']} us"
    )
    print(
        f"{'mechanism':<18} {'prod us/rec':>22} {'cons us/rec':>22} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'n':>6}"
    )
    for m, trials in runs.items():
        prod = [t["producer_s"] / n * 1e6 for t in trials]
        cons = [t["consumer_s"] / n * 1e6 for t in trials]
        lat = [x * 1000 for t in trials for x in t["latencies"]]
        row: dict[str, Any] = {
            "producer_us": [round(x, 1) for x in prod],
            "consumer_us": [round(x, 1) for x in cons],
            "producer_us_median": round(statistics.median(prod), 1),
            "consumer_us_median": round(statistics.median(cons), 1),
            "p50_ms": round(percentile(lat, 0.50), 3) if lat else None,
            "p99_ms": round(percentile(lat, 0.99), 3) if lat else None,
            "samples": len(lat),
        }
        commits = [x * 1000 for t in trials for x in t["commits"]]
        if commits:
            row["commit_p50_ms"] = round(percentile(commits, 0.50), 3)
            row["commit_p99_ms"] = round(percentile(commits, 0.99), 3)
            row["commits"] = len(commits)
        summary["mechanisms"][m] = row
        print(
            f"{m:<18} {row['producer_us']!s:>22} {row['consumer_us']!s:>22} "
            f"{row['p50_ms']!s:>7} {row['p99_ms']!s:>7} {len(lat):>6}"
            + (f"  commit p50 {row['commit_p50_ms']} p99 {row['commit_p99_ms']}" if commits else "")
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
