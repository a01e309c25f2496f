// hetmesh dashboard: renders the hub's fleet snapshot from the /v1/events stream (el, fill,
// utilBar: common.js; the mesh, carbon, deferred and moves panels: system.js).
// No framework, no build step; every value goes in through textContent.
"use strict";

const STATES = ["online", "degraded", "partitioned", "offline", "unknown"];
let snap = null;        // latest snapshot from the hub
let offset = 0;         // hub clock minus browser clock, seconds
let live = false;       // whether the stream is connected

function hubNow() { return Date.now() / 1000 + offset; }

function ago(ts) {
  if (ts === null || ts === undefined) return "never";
  const s = Math.max(0, hubNow() - ts);
  if (s < 60) return s.toFixed(1) + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  return Math.floor(s / 3600) + " h ago";
}

// The hub's state, unless our copy is itself too old to vouch for an agent being healthy.
function stateOf(agent) {
  const healthy = agent.state === "online" || agent.state === "degraded";
  if (!live && healthy) return "unknown";
  if (healthy && hubNow() - agent.last_seen > snap.stale_after_s) return "unknown";
  return agent.state;
}

function renderCounts(counts) {
  const box = document.getElementById("summary");
  box.replaceChildren(...STATES.map((s) => {
    const chip = el("span", counts[s] + " " + s, "chip state-" + s);
    chip.dataset.state = s;
    return chip;
  }));
}

function renderFleet() {
  const counts = Object.fromEntries(STATES.map((s) => [s, 0]));
  const stateByAgent = {};
  const rows = snap.agents.map((a) => {
    const state = stateOf(a);
    counts[state] += 1;
    stateByAgent[a.id] = state;
    const tr = el("tr");
    tr.dataset.agent = a.id;
    tr.append(el("td", a.id, "mono"), el("td", a.board || "—"));
    tr.append(el("td", Object.entries(a.labels || {}).map(([k, v]) => k + "=" + v).join(" ")));
    const badge = el("span", state, "badge state-" + state);
    const cell = el("td", null, "state");
    cell.dataset.state = state;
    cell.append(badge);
    tr.append(cell, el("td", ago(a.last_seen), "lastseen"));
    tr.append(el("td", trustedPeers(snap, a.id).join(", ") || "—", "peers"));
    const policy = a.policy || "—";
    const desired = a.desired_name ? a.desired_name + "@" + a.desired_version : null;
    const pending = desired && desired !== a.policy ? " → " + desired : "";
    tr.append(el("td", policy + pending, pending ? "mono pending" : "mono"));
    const lost = a.lost ? ", " + a.lost + " lost" : "";
    tr.append(el("td", "acked #" + (a.acked_seq || 0) + lost, "mono"));
    tr.append(el("td", a.problem || "", "problem"));
    return tr;
  });
  fill("fleet", rows);
  renderCounts(counts);
  return stateByAgent;
}

function renderDevices(stateByAgent) {
  fill("devices", snap.devices.map((d) => {
    const tr = el("tr");
    const current = d.current && live && (stateByAgent[d.agent_id] === "online" ||
      stateByAgent[d.agent_id] === "degraded");
    if (!current) tr.className = "stale";
    tr.append(el("td", d.agent_id, "mono"), el("td", d.device_id, "mono"), el("td", d.kind || ""));
    const cell = el("td");
    cell.append(utilBar(current ? d.utilization : null, current ? "—" : "stale"));
    tr.append(cell);
    tr.append(el("td", current && d.queued_s !== null ? d.queued_s.toFixed(2) + " s" : "—"));
    tr.append(el("td", current ? d.health || "" : "unknown"));
    return tr;
  }));
}

function seconds(s) {
  if (s === null || s === undefined) return "—";
  if (s < 0.001) return (s * 1e6).toFixed(0) + " µs";
  return s < 1 ? (s * 1000).toFixed(1) + " ms" : s.toFixed(2) + " s";
}

function throughputRow(label, f, scope) {
  const tr = el("tr", null, scope === "fleet" ? "total" : "");
  tr.dataset.scope = scope;
  tr.append(el("td", label, "mono"), el("td", f.per_s.toFixed(2), "num rate"));
  tr.append(el("td", f.done, "num"), el("td", f.failed, f.failed ? "num problem" : "num"));
  tr.append(el("td", seconds(f.latency_p50_s), "num p50"), el("td", seconds(f.latency_p95_s), "num"));
  tr.append(el("td", seconds(f.latency_mean_s), "num"));
  return tr;
}

function renderThroughput() {
  const t = snap.throughput;
  if (!t) return;
  document.getElementById("throughput-window").textContent = "last " + t.window_s + " s";
  const rows = t.agents.map((a) => throughputRow(a.agent_id, a, a.agent_id));
  if (rows.length) rows.push(throughputRow("fleet", t.fleet, "fleet"));
  fill("throughput", rows);
}

function renderDecisions() {
  fill("decisions", snap.decisions.map((d) => {
    const tr = el("tr");
    tr.append(el("td", ago(d.received_at)), el("td", d.agent_id, "mono"));
    const task = el("td", (d.task_id || "").slice(0, 12), "mono");
    task.title = d.task_id || "";
    tr.append(task, el("td", d.device || "—", "mono"));
    tr.append(el("td", d.policy || "", "mono"));
    tr.append(el("td", d.why_here || d.summary || "", "why"));
    return tr;
  }));
}

function renderPolicies() {
  fill("policies", snap.policies.map((p) => {
    const tr = el("tr");
    tr.append(el("td", p.name, "mono"), el("td", "v" + p.latest));
    const r = p.rollout;
    const text = r ? "v" + r.version + " " + r.state.replace("_", " ") +
      (r.reason ? " (" + r.reason + ")" : "") : "not rolled out";
    tr.append(el("td", text, r ? "rollout-" + r.state : ""));
    return tr;
  }));
}

function render() {
  if (!snap) return;
  const conn = document.getElementById("conn");
  conn.textContent = live ? "live" : "disconnected: states unknown until the hub answers";
  conn.className = "conn " + (live ? "up" : "down");
  renderDevices(renderFleet());
  renderThroughput();
  renderDecisions();
  renderPolicies();
  renderSystem(snap, ago);
  document.body.classList.remove("loading");
}

function connect() {
  const source = new EventSource("/v1/events");
  source.addEventListener("fleet", (event) => {
    snap = JSON.parse(event.data);
    offset = snap.now - Date.now() / 1000;
    live = true;
    render();
  });
  source.onerror = () => {  // EventSource reconnects by itself
    live = false;
    if (!snap) {
      const conn = document.getElementById("conn");
      conn.textContent = "hub not answering";
      conn.className = "conn down";
    }
    render();
  };
}

connect();
setInterval(render, 1000);  // ages tick, and stale data turns unknown without a push
