// The dashboard's system panels, from the fleet snapshot (GET /v1/fleet, docs/hub-protocol.md
// §9): the mesh (who trusts whom, by agent name, with state and RTT), each site's carbon now
// and its next clean window, the work held for a cleaner hour, and the hub's moves with
// their outcome. el, fill, rtt, utc: common.js. Every value goes in through textContent.
"use strict";

// The agents `agentId` sees online in its mesh, by name (hub agent id where the hub knows it).
function trustedPeers(snap, agentId) {
  return (snap.mesh || []).filter((l) => l.from === agentId && l.state === "online")
    .map((l) => l.to);
}

function grams(g) {
  return (g !== 0 && Math.abs(g) < 0.01 ? g.toExponential(2) : g.toPrecision(3)) + " g";
}

function renderMesh(snap, ago) {
  fill("mesh", (snap.mesh || []).map((l) => {
    const tr = el("tr");
    tr.dataset.from = l.from;
    tr.dataset.to = l.to;
    const state = el("td", null, "state");
    state.dataset.state = l.state;
    state.append(el("span", l.state, "badge peer-" + l.state));
    const to = el("td", l.to, "mono");
    if (!l.to_agent) to.title = "mesh id " + l.to_mesh_id + ": not an agent of this hub";
    tr.append(el("td", l.from, "mono"), to, state, el("td", rtt(l.rtt_ms), "num rtt"));
    tr.append(el("td", ago(l.reported_at)));
    return tr;
  }));
}

function renderCarbon(snap) {
  fill("carbon", (snap.carbon || []).map((c) => {
    const tr = el("tr");
    tr.dataset.site = c.agent_id;
    const now = c.g_per_kwh_now === null ? "—" : c.g_per_kwh_now.toFixed(0) + " g/kWh";
    let clean = "—";
    if (c.clean_g_per_kwh !== null) {
      const when = c.clean_at <= snap.now + 1 ? "now" : "from " + utc(c.clean_at);
      clean = c.clean_g_per_kwh.toFixed(0) + " g/kWh " + when;
    }
    const cleanCell = el("td", clean, "window-clean");
    if (c.clean_g_per_kwh !== null && c.clean_g_per_kwh < c.g_per_kwh_now) {
      cleanCell.classList.add("clean");
    }
    tr.append(el("td", c.agent_id, "mono"), el("td", now, "num now"), cleanCell);
    return tr;
  }));
}

function renderDeferred(snap) {
  fill("deferred", (snap.deferred || []).map((d) => {
    const tr = el("tr");
    tr.dataset.task = d.task_id;
    const task = el("td", d.task_id.slice(0, 12), "mono");
    task.title = d.task_id;
    tr.append(el("td", d.agent_id, "mono"), task, el("td", utc(d.held_until), "held"));
    if (d.moving_to) {
      tr.append(el("td", "then moves to " + d.moving_to, "why moving"), el("td", "—", "num"));
    } else {
      tr.append(el("td", utc(d.latest_start)), el("td", d.g_per_kwh.toFixed(0), "num"));
    }
    return tr;
  }));
}

function renderMoves(snap) {
  fill("moves", (snap.moves || []).map((m) => {
    const tr = el("tr");
    tr.dataset.move = m.id;
    tr.dataset.task = m.task_id;
    const task = el("td", m.task_id.slice(0, 12), "mono");
    task.title = m.task_id;
    const outcome = m.state + (m.ran_on ? " on " + m.ran_on : "") +
      (m.state === "refused" || m.state === "failed" || m.state === "expired"
        ? ": " + (m.reason || "") : "");
    tr.append(task, el("td", m.origin + " → " + m.target, "mono"));
    tr.append(el("td", grams(m.saving_g), "num"));
    tr.append(el("td", outcome, "why outcome move-" + m.state));
    return tr;
  }));
}

function renderSystem(snap, ago) {
  renderMesh(snap, ago);
  renderCarbon(snap);
  renderDeferred(snap);
  renderMoves(snap);
}
