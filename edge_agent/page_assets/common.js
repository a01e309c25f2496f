// Shared by the agent's status page and the hub's dashboard (served by both as common.js,
// like base.css): element building and the utilization bar. Every value goes in through
// textContent.
"use strict";

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

// Replace table #id's rows; hide its "#id-empty" note when there are rows.
function fill(id, rows) {
  document.querySelector("#" + id + " tbody").replaceChildren(...rows);
  const empty = document.getElementById(id + "-empty");
  if (empty) empty.hidden = rows.length > 0;
}

// A utilization bar with its percentage; "—" (or `missing`) when there is no figure.
function utilBar(fraction, missing) {
  const util = el("div", null, "util");
  if (fraction !== null && fraction !== undefined) {
    const bar = el("div", null, "bar");
    const fillBar = el("span");
    fillBar.style.width = Math.round(fraction * 100) + "%";
    bar.append(fillBar);
    util.append(bar, el("span", Math.round(fraction * 100) + "%", "pct"));
  } else {
    util.append(el("span", missing || "—", "pct"));
  }
  return util;
}

// A round-trip time in ms as people read it.
function rtt(ms) {
  if (ms === null || ms === undefined) return "—";
  return ms < 10 ? ms.toFixed(2) + " ms" : ms.toFixed(0) + " ms";
}

// A Unix time as HH:MM UTC (with the date when it is not today).
function utc(ts) {
  if (ts === null || ts === undefined) return "—";
  const d = new Date(ts * 1000);
  const iso = d.toISOString();
  const today = new Date().toISOString().slice(0, 10);
  return (iso.slice(0, 10) === today ? "" : iso.slice(0, 10) + " ") + iso.slice(11, 16) + " UTC";
}
