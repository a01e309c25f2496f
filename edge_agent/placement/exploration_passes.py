"""A Placer's exploration passes: the optimistic pass over untried pairs and the probe of
clamped factors (the ``ExplorationPasses`` mixin; the bookkeeping is ``explore.Explorer``)."""

from __future__ import annotations

import math
from array import array
from collections.abc import Collection, Sequence

from edge_agent.placement import kernel, learning
from edge_agent.placement import layout as L
from edge_agent.placement.decision import Decision, DecisionContext, decided
from edge_agent.placement.explore import CONGESTED, Explorer
from edge_agent.placement.reference_one import pressed
from edge_agent.placement.workspace import Workspace
from edge_agent.tasks.contract import TaskContract

_SERVICE, _ASSIGNED = L.OUT_EST + L.EST_SERVICE_S, L.OUT_ASSIGNED
_USUAL = L.EX_ROW_USUAL * L.OUT_FIELDS  # the rows' offsets in ``Workspace.out_flat``
_PROBE = L.EX_ROW_PROBE * L.OUT_FIELDS
_EX_PROBE, _EX_NO_UNTRIED, _EX_DEFERRED = L.EX_PROBE, L.EX_NO_UNTRIED, L.EX_DEFERRED


class ExplorationPasses:
    """``Placer._explore`` and ``Placer._probe``: decisions that also try what is unknown
    (each one kernel call: the kernel's ``MODE_EXPLORE`` and ``MODE_PROBE``)."""

    _ws: Workspace
    _ctx: DecisionContext
    _call: kernel.KernelCall
    _out_flat: array[float]  # the workspace's output rows, flat (``Placer._bind``)
    _reasons_row: memoryview | None  # reasons rows 0 and 1 (None: reasons not kept)
    _reasons_row1: memoryview | None
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
        usual = self._ws.out[L.EX_ROW_USUAL].tolist()  # pressed, as the one call sets it
        explorer.set_pressed(cls, pressed(usual, CONGESTED))
        return self._explored(contract, cls, outcome)

    def _explored(self, contract: TaskContract, cls: int, outcome: int) -> Decision:
        """Return the decision of an exploration call that ended with ``outcome`` (``EX_*``;
        its rows in the workspace) and record what it did (the class's pressed flag is the
        kernel's: ``hm_place_one`` sets it from the usual row)."""
        explorer = self.exploration
        explorer.optimistic_pass()
        out = self._out_flat  # rows as array slices: each a copy, one allocation
        usual: Sequence[float] = out[_USUAL : _USUAL + L.OUT_FIELDS]
        if outcome == _EX_PROBE:
            row: Sequence[float] = out[_PROBE : _PROBE + L.OUT_FIELDS]
            kept = self._reasons_row1
            reasons = None if kept is None else kept.tobytes()
            decision = decided(contract, row, self._ctx, reasons, cls, self._sources[cls])
            decision.probe = True
            placed = usual[_ASSIGNED] >= 0
            hopeless = placed and (int(usual[L.OUT_FLAGS]) & L.OF_LATE) != 0
            usual_s = usual[_SERVICE] if placed else math.inf
            explorer.probed(cls, int(row[_ASSIGNED]), decision, usual_s, hopeless=hopeless)
            return decision
        if outcome in (_EX_NO_UNTRIED, _EX_DEFERRED):  # due again later, no back-off
            explorer.deferred()  # (no untried device: each runs another class's probe)
        else:  # no untried device among the candidates, or none won: back off
            explorer.fruitless(cls)
        kept = self._reasons_row
        reasons = None if kept is None else kept.tobytes()
        return decided(contract, usual, self._ctx, reasons, cls, self._sources[cls])

    def _probe(self, candidates: Collection[str] | None) -> tuple[int, int, bool]:
        """Decide task 0, committed, with its class's clamped factors counted as 1 when it has
        any (bounded exploration; ``learning``): one kernel call, as a decision costs.

        Returns (status, bad index, whether a factor was clamped: the decision is a probe).
        """
        restricted = candidates is not None
        if candidates is not None and candidates is not self._restricted_to:
            self._restrict(candidates)
        return self._call.probe(learning.CLAMPED_BELOW, learning.CLAMPED_ABOVE, restricted)
