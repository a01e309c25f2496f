"""A Placer's exploration passes: the optimistic pass over untried pairs and the probe of
clamped factors (the ``ExplorationPasses`` mixin; the bookkeeping is ``explore.Explorer``)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from edge_agent.placement import kernel, learning
from edge_agent.placement import layout as L
from edge_agent.placement.decision import Decision, DecisionContext
from edge_agent.placement.explore import CONGESTED, Explorer
from edge_agent.placement.workspace import Workspace
from edge_agent.tasks.contract import TaskContract

_LATENCY = L.OUT_EST + L.EST_LATENCY_S
_SERVICE = L.OUT_EST + L.EST_SERVICE_S
_USUAL = L.EX_ROW_USUAL * L.OUT_FIELDS  # the rows' offsets in ``Workspace.out_flat``
_PROBE = L.EX_ROW_PROBE * L.OUT_FIELDS


class ExplorationPasses:
    """``Placer._explore`` and ``Placer._probe``: decisions that also try what is unknown
    (each one kernel call: the kernel's ``MODE_EXPLORE`` and ``MODE_PROBE``)."""

    _ws: Workspace
    _ctx: DecisionContext
    _call: kernel.KernelCall
    _restricted_to: Collection[str] | None
    _sources: list[tuple[str, ...] | None]
    exploration: Explorer

    def _restrict(self, candidates: Collection[str]) -> None:
        raise NotImplementedError  # Placer's

    def _explore(
        self, contract: TaskContract, cls: int, candidates: Collection[str] | None
    ) -> Decision:
        """Decide as usual and with untried pairs' estimates divided by their optimism.

        Returns the probe when the optimistic pass picks an untried device, else the usual
        decision; see ``explore``. One kernel call (``MODE_EXPLORE``, or its twin) runs the
        passes from the state before the decision and charges only the one kept, so the
        pass costs about a decision: nothing is copied or undone here.
        """
        explorer = self.exploration
        restricted = candidates is not None
        if candidates is not None and candidates is not self._restricted_to:
            self._restrict(candidates)
        status, bad, outcome = self._call.explore(explorer.divisors(cls), explorer.busy, restricted)
        if status:
            kernel.check(status, bad)
        return self._explored(contract, cls, outcome)

    def _explored(self, contract: TaskContract, cls: int, outcome: int) -> Decision:
        """Return the decision of an exploration call that ended with ``outcome`` (``EX_*``;
        its rows in the workspace) and record what it did."""
        ws = self._ws
        explorer = self.exploration
        out = ws.out_flat  # rows as array slices: each a copy, one allocation
        usual: Sequence[float] = out[_USUAL : _USUAL + L.OUT_FIELDS]
        hopeless = usual[L.OUT_ASSIGNED] >= 0 and (int(usual[L.OUT_FLAGS]) & L.OF_LATE) != 0
        explorer.set_pressed(cls, hopeless or (usual[_LATENCY] > CONGESTED * usual[_SERVICE]))
        if outcome == L.EX_PROBE:
            row: Sequence[float] = out[_PROBE : _PROBE + L.OUT_FIELDS]
            reasons = ws.reasons[1].tobytes() if ws.keep_reasons else None
            decision = Decision(
                contract, row, self._ctx, reasons, cls, self._sources[cls], probe=True
            )
            usual_s = usual[_SERVICE] if usual[L.OUT_ASSIGNED] >= 0 else math.inf
            chosen = int(row[L.OUT_ASSIGNED])
            explorer.probed(cls, chosen, decision, usual_s, hopeless=hopeless)
            return decision
        if outcome in (L.EX_NO_UNTRIED, L.EX_DEFERRED):  # due again later, no back-off
            explorer.deferred()  # (no untried device: each runs another class's probe)
        else:  # no untried device among the candidates, or none won: back off
            explorer.fruitless(cls)
        reasons = ws.reasons0.tobytes() if ws.keep_reasons else None
        return Decision(contract, usual, self._ctx, reasons, cls, self._sources[cls])

    def _probe(self, candidates: Collection[str] | None) -> tuple[int, int, bool]:
        """Decide task 0, committed, with its class's clamped factors counted as 1 when it has
        any (bounded exploration; ``learning``): one kernel call, as a decision costs.

        Returns (status, bad index, whether a factor was clamped: the decision is a probe).
        """
        restricted = candidates is not None
        if candidates is not None and candidates is not self._restricted_to:
            self._restrict(candidates)
        return self._call.probe(learning.CLAMPED_BELOW, learning.CLAMPED_ABOVE, restricted)
