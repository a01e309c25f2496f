// Federated learning panel: runs, model versions with their error against EWMA, and each
// agent's predictor, from GET /v1/learning (polled; the fleet stream does not carry it).
// Fills <section id="learning"> only (el: common.js); every value goes in through textContent.
// Run ids arrive as strings (a Flower run id is 64-bit; a JS number would round it).
"use strict";

(() => {
  const POLL_MS = 5000;

  function num(v, digits) { return typeof v === "number" ? v.toFixed(digits) : "—"; }

  function when(ts) { return ts ? new Date(ts * 1000).toLocaleString() : "—"; }

  function table(id, heads, rows, empty) {
    const t = el("table");
    t.id = id;
    const tr = el("tr");
    tr.append(...heads.map((h) => el("th", h)));
    const head = el("thead");
    head.append(tr);
    const body = el("tbody");
    body.append(...rows);
    t.append(head, body);
    const out = [t];
    if (!rows.length) out.push(el("p", empty, "empty"));
    return out;
  }

  function row(cells) {
    const tr = el("tr");
    tr.append(...cells.map(([text, cls]) => el("td", text, cls)));
    return tr;
  }

  function render(doc) {
    const box = document.getElementById("learning");
    if (!box) return;
    const status = doc.enabled
      ? "SuperLink " + doc.superlink + (doc.active ? " — rounds wanted now" : " — idle")
      : "no SuperLink (hub learning_port is 0); models can still be registered";
    // replies per round (train / evaluate results), from Flower's record of the run
    const replies = (r) => (r.rounds || []).map((x) => x.train + "/" + x.evaluate).join(" · ");
    const runs = doc.runs.slice().reverse().map((r) => row([
      [when(r.started_at)], [r.run_id === null ? "—" : r.run_id, "mono run-id"],
      [r.status, "run-" + r.status], [r.nodes, "num run-nodes"], [replies(r) || "—", "num"],
      [r.model_version === null ? "—" : "v" + r.model_version], [r.error || "", "why"],
    ]));
    const models = doc.models.slice().reverse().map((m) => {
      const k = m.metrics;
      const gain = typeof k.eval_rel_mae === "number" && typeof k.ewma_rel_mae === "number"
        ? ((1 - k.eval_rel_mae / k.ewma_rel_mae) * 100).toFixed(0) + " %" : "—";
      return row([
        ["v" + m.version], [when(m.added_at)], [num(k.rounds_completed, 0), "num"],
        [num(k.eval_rel_mae, 3), "num"], [num(k.ewma_rel_mae, 3), "num"], [gain, "num"],
        [m.sha256.slice(0, 12), "mono"],
      ]);
    });
    const agents = Object.entries(doc.agents).sort().map(([id, a]) => {
      const m = a.model || {};
      const acc = m.accepted || {};
      const last = m.last_verdict;
      const verdict = last
        ? "v" + last.version + (last.accepted ? " accepted" : " refused: " + last.reason) : "—";
      const sn = a.supernode || {};
      return row([
        [id, "mono"], [m.version ? "v" + m.version + (m.personalised ? " (personalised)" : "") : "EWMA"],
        [num(acc.candidate_rel_mae, 3), "num"], [num(acc.ewma_rel_mae, 3), "num"],
        [verdict, "why"], [sn.running ? "running" : "stopped"],
      ]);
    });
    box.replaceChildren(
      el("h2", "Federated learning"), el("p", status, "empty"),
      el("h3", "Rounds"),
      ...table("fl-runs", ["started", "run", "status", "nodes", "replies per round (train/eval)",
        "model", "error"], runs,
        "No training runs yet."),
      el("h3", "Models (federated evaluation; rel. MAE = MAE ÷ mean load)"),
      ...table("fl-models", ["version", "added", "rounds", "model rel. MAE", "EWMA rel. MAE",
        "better than EWMA", "sha256"], models, "No model registered yet."),
      el("h3", "Predictor on each agent (rel. MAE on its own recent telemetry)"),
      ...table("fl-agents", ["agent", "model", "model rel. MAE", "EWMA rel. MAE", "last verdict",
        "SuperNode"], agents, "No agent has reported its predictor yet."),
    );
    box.hidden = false;
  }

  async function poll() {
    try {
      const resp = await fetch("/v1/learning", { cache: "no-store" });
      if (resp.ok) render(await resp.json());
    } catch (err) {
      // the hub is unreachable: keep the last panel; the fleet view says so
    }
  }

  poll();
  setInterval(poll, POLL_MS);
})();
