"""A Placer's exploration passes: the optimistic pass over untried pairs and the probe of
clamped factors (the ``ExplorationPasses`` mixin; the bookkeeping is ``explore.Explorer``)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from edge_agent.placement import layout as L
from edge_agent.placement import learning
from edge_agent.placement.decision import Decision, DecisionContext
from edge_agent.placement.explore import CONGESTED, Explorer
from edge_agent.placement.workspace import Workspace
from edge_agent.tasks.contract import TaskContract

_LATENCY = L.OUT_EST + L.EST_LATENCY_S
_SERVICE = L.OUT_EST + L.EST_SERVICE_S


class ExplorationPasses:
    """``Placer._explore`` and ``Placer._probe``: extra kernel passes that try what is unknown."""

    _ws: Workspace
    _ctx: DecisionContext
    _sources: list[tuple[str, ...] | None]
    exploration: Explorer
    device_ids: tuple[str, ...]

    def _decide(
        self, n_task: int, candidates: Collection[str] | None
    ) -> tuple[Sequence[float], bytes | None]:
        raise NotImplementedError  # Placer's

    def _explore(
        self, contract: TaskContract, cls: int, candidates: Collection[str] | None
    ) -> Decision:
        """Decide as usual and with untried pairs' estimates divided by their optimism.

        Returns the probe when the optimistic pass picks an untried device, else the usual
        decision (as committed by the usual pass); see ``explore``.
        """
        ws = self._ws
        before = ws.devices.copy()
        usual, usual_reasons = self._decide(1, candidates)
        after = ws.devices.copy()
        hopeless = usual[L.OUT_ASSIGNED] >= 0 and (int(usual[L.OUT_FLAGS]) & L.OF_LATE) != 0
        self.exploration.pressed[cls] = hopeless or (usual[_LATENCY] > CONGESTED * usual[_SERVICE])
        divisors = self.exploration.optimism_row(cls)  # a copy: tried() may change the row
        untried = divisors > 1.0
        if not untried.any():  # each untried device runs another class's probe
            self.exploration.deferred()  # due again later, no back-off
            return Decision(contract, usual, self._ctx, usual_reasons, cls, self._sources[cls])
        if candidates is not None and not untried[ws.allowed != 0].any():
            # no untried device among the call's candidates (flagged by the usual pass):
            # the optimistic pass could only pick a tried one, so skip it (as its outcome)
            self.exploration.fruitless(cls)
            return Decision(contract, usual, self._ctx, usual_reasons, cls, self._sources[cls])
        ws.devices[:] = before
        row = ws.corrections[cls]
        kept = row.copy()
        row /= divisors
        try:
            out, reasons = self._decide(1, candidates)
        finally:
            row[:] = kept
        chosen = int(out[L.OUT_ASSIGNED])
        optimism = divisors[chosen] if chosen >= 0 else 1.0
        if optimism != 1.0:  # the optimistic pass chose the device; estimate and charge honestly
            ws.devices[:] = before
            out, reasons = self._decide(1, [self.device_ids[chosen]])  # not kept
        decision = Decision(contract, out, self._ctx, reasons, cls, self._sources[cls], probe=True)
        if optimism == 1.0 or not decision.placed or (decision.late and not hopeless):
            # no untried device won (back off), or trying it would cost this task its
            # bound: a probe never spends a deadline that the usual choice would meet
            # (deferred to a task that can carry it); the usual decision stands
            ws.devices[:] = after
            if optimism == 1.0:
                self.exploration.fruitless(cls)
            else:
                self.exploration.deferred()
            return Decision(contract, usual, self._ctx, usual_reasons, cls, self._sources[cls])
        usual_s = usual[L.OUT_EST + L.EST_SERVICE_S] if usual[L.OUT_ASSIGNED] >= 0 else math.inf
        self.exploration.probed(cls, chosen, decision, usual_s, hopeless=hopeless)
        return decision

    def _probe(
        self, cls: int, candidates: Collection[str] | None
    ) -> tuple[Sequence[float], bytes | None] | None:
        """Decide with the class's clamped factors at 1 (bounded exploration), or None."""
        row = self._ws.corrections[cls]
        stuck = learning.clamped(row)
        if not stuck.any():
            return None
        saved = row[stuck].copy()
        row[stuck] = 1.0
        try:
            return self._decide(1, candidates)
        finally:
            row[stuck] = saved
