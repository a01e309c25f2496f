// hetmesh agent status page: polls the agent's own /v1/status (el, fill, utilBar, rtt, utc:
// common.js). No framework, no build step; every value goes in through textContent. The page
// is a skeleton (body.loading) until the first answer, fetched as soon as the script runs.
"use strict";

let live = false;
// The agent's API token ([api] auth), asked for once its API answers 401; kept for this tab
// only (sessionStorage), sent as "Authorization: Bearer" with every data call.
const TOKEN_KEY = "hetmesh-agent-token";
let askingToken = false;

function authHeaders(token) {
  return token ? {Authorization: "Bearer " + token} : {};
}

async function askToken(resp) {
  let why = "This agent asks for its API token.";
  try {
    why = (await resp.json()).error || why;
  } catch (err) {
    // not the agent's JSON error: keep the general line
  }
  sessionStorage.removeItem(TOKEN_KEY);
  askingToken = true;
  document.getElementById("token-why").textContent = why;
  document.getElementById("token-form").hidden = false;
  const conn = document.getElementById("conn");
  conn.textContent = "token needed";
  conn.className = "conn down";
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  document.getElementById("token-form").hidden = true;
  askingToken = false;
  poll();
});

function seconds(s) {
  if (s === null || s === undefined) return "—";
  return s < 1 ? (s * 1000).toFixed(2) + " ms" : s.toFixed(2) + " s";
}

function ago(ts) {
  if (ts === null || ts === undefined) return "never";
  const s = Math.max(0, Date.now() / 1000 - ts);
  return s < 60 ? s.toFixed(1) + " s ago" : Math.floor(s / 60) + " min ago";
}

function facts(id, pairs) {
  const box = document.getElementById(id);
  box.replaceChildren(...pairs.flatMap(([k, v, cls]) => {
    const dd = el("dd", v, cls);
    dd.dataset.key = k;
    return [el("dt", k), dd];
  }));
}

function renderHealth(doc) {
  const h = doc.health;
  const chip = el("span", h.status, "badge state-" + (h.status === "ok" ? "online" : "degraded"));
  chip.id = "status";
  document.getElementById("summary").replaceChildren(chip);
  const c = doc.counts;
  facts("health", [
    ["status", h.status + (h.problem ? ": " + h.problem : "")],
    ["version", h.version],
    ["uptime", seconds(h.uptime_s)],
    ["fleet", h.fleet.devices + " devices, " + h.fleet.mode +
      (h.fleet.profile ? " (" + h.fleet.profile + ")" : "")],
    ["queue", (doc.queue.waiting + doc.queue.deferred) + " queued: " + doc.queue.waiting +
      " waiting, " + doc.queue.deferred + " deferred; " + h.backlog + " on devices"],
    ["tasks", ["queued", "deferred", "running", "done", "failed"]
      .map((s) => (c[s] || 0) + " " + s).join(", ")],
  ]);
}

function renderDevices(doc) {
  fill("devices", doc.devices.map((d) => {
    const tr = el("tr");
    tr.dataset.device = d.id;
    tr.append(el("td", d.id, "mono"), el("td", d.kind));
    const cell = el("td");
    cell.append(utilBar(d.utilization));
    tr.append(cell, el("td", seconds(d.queued_s)), el("td", d.health || "unknown"));
    const running = d.running_tasks.map((id) => id.slice(0, 12)).join(", ");
    tr.append(el("td", running || "idle", "mono"));
    return tr;
  }));
}

function renderTasks(doc) {
  fill("tasks", doc.tasks.map((t) => {
    const tr = el("tr");
    tr.dataset.task = t.id;
    tr.append(el("td", t.id.slice(0, 12), "mono"), el("td", t.state, "task-" + t.state));
    tr.append(el("td", t.device || "—", "mono"), el("td", seconds(t.latency_s), "num"));
    tr.append(el("td", t.why_here || t.error || "", "why"));
    return tr;
  }));
}

function renderDeferred(doc) {
  fill("deferred", doc.deferred.map((t) => {
    const tr = el("tr");
    tr.dataset.task = t.id;
    tr.append(el("td", t.id.slice(0, 12), "mono"), el("td", t.held_until || "—", "mono held"));
    return tr;
  }));
}

function renderMesh(doc) {
  const m = doc.mesh;
  const note = document.getElementById("mesh-empty");
  note.textContent = m.enabled ? "No peers seen yet." : "No mesh configured (mesh_fleet_key).";
  document.getElementById("mesh-id").textContent = m.enabled ? "as " + m.agent_id : "";
  fill("mesh", m.peers.map((p) => {
    const tr = el("tr");
    tr.dataset.peer = p.agent_id;
    const state = el("td", null, "state");
    state.dataset.state = p.state;
    state.append(el("span", p.state, "badge peer-" + p.state));
    tr.append(el("td", p.agent_id, "mono"), state, el("td", rtt(p.rtt_ms), "num rtt"));
    tr.append(el("td", p.address, "mono"), el("td", p.kinds || "", "mono"));
    tr.append(el("td", ago(Date.now() / 1000 - p.seen_ago_s)));
    return tr;
  }));
}

function renderHub(doc) {
  const hub = doc.health.hub;
  if (!hub) {
    facts("hub", [["hub", "none configured: this agent works on its own", "muted"]]);
    return;
  }
  const d = hub.discovery;
  const pairs = [
    ["hub", hub.url],
    ["state", hub.connected ? "connected" : "offline: working on its own",
      hub.connected ? "ok" : "warn"],
    ["agent id", hub.agent_id],
    ["last contact", ago(hub.last_contact)],
    ["outbox", hub.pending + " pending, " + hub.dropped + " dropped, acked #" + hub.acked],
  ];
  if (d) pairs.push(["discovery", "mDNS: " + (d.hub_id || "no verified hub") + ", " +
    d.refused + " refused"]);
  facts("hub", pairs);
}

function renderPolicy(doc) {
  const p = doc.policy;
  const weights = Object.entries(p.weights).map(([k, v]) => k + " " + Number(v).toFixed(2));
  facts("policy", [
    ["policy", p.name + "@" + p.version],
    ["weights", weights.join(", ")],
    ["rules", Object.keys(p.rules).length ? Object.keys(p.rules).join(", ") : "none"],
  ]);
}

async function poll() {
  if (askingToken) return;  // no polling until a token is given
  let doc = null;
  try {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const resp = await fetch("/v1/status", {cache: "no-store", headers: authHeaders(token)});
    if (resp.status === 401) {
      // an answer to a token since replaced (a poll still on its way) asks nothing
      if (token === sessionStorage.getItem(TOKEN_KEY) && !askingToken) await askToken(resp);
      return;
    }
    if (!resp.ok) throw new Error("status " + resp.status);
    doc = await resp.json();
  } catch (err) {
    doc = null;  // the agent is not answering; keep the last data shown
  }
  live = doc !== null;
  const conn = document.getElementById("conn");
  conn.textContent = live ? "live" : "agent not answering";
  conn.className = "conn " + (live ? "up" : "down");
  if (!live) return;
  // a rendering error is a page error (not "agent not answering")
  renderHealth(doc);
  renderDevices(doc);
  renderTasks(doc);
  renderDeferred(doc);
  renderMesh(doc);
  renderHub(doc);
  renderPolicy(doc);
  document.body.classList.remove("loading");
}

poll();
setInterval(poll, 1000);
