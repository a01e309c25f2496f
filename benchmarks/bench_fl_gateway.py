"""What the Fleet gateway costs a SuperNode's call: the same Fleet call direct and through it.

A real TLS SuperLink with SuperNode authentication on loopback and the hub's FleetGateway in
front of it. Each sample is one ``POST /v1/fleet/get-run`` with a 2 kB body on a kept-alive
TLS connection (unsigned, so Flower's node authentication answers 401 after reading it),
alternating direct and gateway blocks. JSON last line: per path n, p50 and p99 in ms, and the
gateway/direct ratio of the p50s.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import shutil
import ssl
import statistics
import tempfile
import time
from pathlib import Path

from cloud_hub.learning.localfed import gated_superlink


def calls(port: int, ca: Path, n: int) -> list[float]:
    """n Fleet calls on one kept-alive TLS connection; each call's milliseconds."""
    ctx = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    out = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            conn.request("POST", "/v1/fleet/get-run", body=b"x" * 2000,
                         headers={"Content-Type": "application/protobuf"})  # fmt: skip
            resp = conn.getresponse()
            resp.read()
            if resp.status != 401:
                raise RuntimeError(f"expected Flower's 401, got {resp.status}")
            out.append((time.perf_counter() - t) * 1000.0)
    finally:
        conn.close()
    return out


def figures(ms: list[float]) -> dict[str, float]:
    """n, p50 and p99 of a sample."""
    ordered = sorted(ms)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 2), "p99_ms": round(p99, 2)}


async def main(blocks: int, per_block: int) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix="hm-gw-"))
    samples: dict[str, list[float]] = {"direct": [], "gateway": []}
    try:
        async with gated_superlink(work) as (link, gateway):
            assert link.cfg.tls is not None
            ca = link.cfg.tls.ca_cert
            for _ in range(blocks):
                for name, port in (("direct", link.cfg.port), ("gateway", gateway.port)):
                    samples[name] += await asyncio.to_thread(calls, port, ca, per_block)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result: dict[str, object] = {k: figures(v) for k, v in samples.items()}
    direct, via = statistics.median(samples["direct"]), statistics.median(samples["gateway"])
    result["p50_ratio_gateway_vs_direct"] = round(via / direct, 2)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--per-block", type=int, default=100)
    a = parser.parse_args()
    print(json.dumps(asyncio.run(main(a.blocks, a.per_block))))
