"""``cloud-hub demo``: a hub and emulated agents on loopback, a mixed workload, live placements.

Every process is a real ``cloud-hub run`` / ``edge-agent run`` child on 127.0.0.1 with an
ephemeral port and its own data directory; each agent emulates a different board (labelled
``mode: emulated board`` on the hub). Children are stopped in a ``finally``, on Ctrl-C and on
SIGTERM alike, and waited for: the demo leaves no process behind.

The agents form one mesh: the demo makes a fleet key (only its fingerprint is printed; the
key is in ``<data dir>/fleet.key``, mode 0600), gives it to every agent with mDNS on
127.0.0.1, waits (bounded) until they trust each other, prints the peer table and submits
work the receiving board cannot run (an NPU-only int8 task to the Jetson, a DPU configuration
task only the KV260's FPGA takes to the RK3588), printing each one's chain, origin -> peer.
Each agent is a site on a different grid: the real 2022 hourly series of
series that ship with the package (CISO, ERCO, NYIS, BPAT), or labelled illustrative
constants when the data is not installed. Two deferrable tasks go to the site with the
dirtiest grid now; the demo prints their deferral, asks the hub for one re-evaluation
(``GET /v1/reevaluation?fresh=1``) and prints the moves it issues and their outcomes while
the demo runs (a moved deferred task waits for the target's clean hour, usually later).

With ``--learning`` (Flower installed: ``pip install '.[learning]'``) the hub also runs a
Flower SuperLink, and after ``--learn-after`` seconds of telemetry the demo asks for one
training run: every agent starts its SuperNode, one FedAvg round trains the load predictor
on each agent's own per-device utilization, the hub registers the ONNX model, and each agent
pulls it, validates it on its own telemetry and swaps it in or records why not. The
dashboard's learning panel shows the run, the model's error and each agent's verdict.

By default the demo prints one summary line per workload round (tasks placed per board,
offloads, failures, held work, the hub's moves) and, when it stops, a closing summary (what
ran where, what was offloaded and why, the carbon story, learning verdicts); ``--verbose``
prints every finished task instead.

The package, by what runs when: ``processes`` (children: start, call, stop), ``grids`` (each
site's carbon series), ``fleet`` (the hub and agents started in one mesh), ``showcases``
(mesh, carbon, deferral, the hub's moves), ``rounds`` (the workload and its summary),
``learning_watch`` (``--learning``), ``cli`` (options and the main loop).
"""

from cloud_hub.demo.cli import configure, main, run
from cloud_hub.demo.grids import Site, sites
from cloud_hub.demo.processes import DemoError

__all__ = ["DemoError", "Site", "configure", "main", "run", "sites"]
