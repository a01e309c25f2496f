"""Replay protection cost: one signed mesh request verified, with the nonce cache empty vs
full, and the memory each remembered nonce takes (docs/security.md, "Replay window").

    python benchmarks/bench_replay.py [--n 20000] [--cap 100000] [--quick]

``verify_*_us`` are percentiles of one ``Verifier.verify`` (HMAC-SHA256 of the request,
recipient, window, nonce cache) over ``n`` fresh requests; ``full_over_empty_p50`` compares
the two in this run (a full cache forgets its oldest nonce on each request). ``bytes_per_nonce``
is traced memory growth per remembered nonce; ``cap_mib`` what the cap costs at that rate.
The last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from edge_agent.mesh.credential import FleetKey, sign_request  # noqa: E402
from edge_agent.mesh.replay import Verifier  # noqa: E402

KEY = FleetKey("bench-replay-fleet-key-000000000")
BODY = json.dumps({"contract": {"semantics": {"gflops": 1.0}}, "key": "k", "attempt": 1}).encode()


def timings(verifier: Verifier, n: int) -> list[float]:
    """Return the time of each of ``n`` verifications of fresh requests, in microseconds."""
    requests = [sign_request(KEY, "a", "POST", "/mesh/v1/tasks", BODY, to="b") for _ in range(n)]
    out = []
    for headers in requests:
        start = time.perf_counter()
        verifier.verify("POST", "/mesh/v1/tasks", BODY, headers)
        out.append((time.perf_counter() - start) * 1e6)
    return out


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--cap", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="2,000 requests, cap 5,000")
    args = parser.parse_args()
    n, cap = (2_000, 5_000) if args.quick else (args.n, args.cap)

    empty = timings(Verifier(KEY, "b", cache_max=cap), n)
    full_verifier = Verifier(KEY, "b", cache_max=cap)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    timings(full_verifier, cap)  # fill it to the cap
    per_nonce = (tracemalloc.get_traced_memory()[0] - before) / cap
    tracemalloc.stop()
    full = timings(full_verifier, n)
    figures = {
        "n": n,
        "cap": cap,
        "verify_empty_p50_us": pct(empty, 0.5),
        "verify_empty_p99_us": pct(empty, 0.99),
        "verify_full_p50_us": pct(full, 0.5),
        "verify_full_p99_us": pct(full, 0.99),
        "full_over_empty_p50": round(statistics.median(full) / statistics.median(empty), 3),
        "bytes_per_nonce": round(per_nonce),
        "cap_mib": round(per_nonce * cap / 2**20, 1),
        "evicted_at_cap": full_verifier._nonces.evicted,
    }
    for k, v in figures.items():
        print(f"{k:>22}: {v}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
