// The voxcache page: a speak box, and the operator's dashboard drawn from GET /v1/dashboard.
// Every text that comes from the server (phrases, voices, error messages) is set with
// textContent, never as HTML: a tenant's phrase must not run in an admin's browser.
"use strict";

const $ = (id) => document.getElementById(id);
const headers = () => {
  const key = $("apikey").value.trim();
  return key ? { "Authorization": "Bearer " + key } : {};
};
const el = (tag, text, cls) => {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (cls) node.className = cls;
  return node;
};

// -- formatting --------------------------------------------------------------------------
const pct = (v) => v === null || v === undefined ? "–" : (100 * v).toFixed(1) + " %";
const int = (v) => v === null || v === undefined ? "–" : Math.round(v).toLocaleString("en");
function bytes(v) {
  if (v === null || v === undefined) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) { v /= 1000; i++; }
  return (i ? v.toFixed(1) : Math.round(v)) + " " + units[i];
}
function secs(v) {
  if (v === null || v === undefined) return "–";
  if (v < 1) return (v * 1000).toPrecision(3) + " ms";
  if (v < 120) return v.toFixed(2) + " s";
  if (v < 7200) return (v / 60).toFixed(1) + " min";
  return (v / 3600).toFixed(1) + " h";
}

// -- the speak box ---------------------------------------------------------------------
async function loadVoices() {
  const r = await fetch("/v1/voices", { headers: headers() });
  if (!r.ok) { $("served").textContent = "voices: " + (await r.json()).error.message; return; }
  const data = await r.json();
  $("voice").replaceChildren();
  for (const v of data.voices) {
    const o = el("option", v.kind === "uploaded" ? `${v.name} (uploaded)` : v.id);
    o.value = v.id;
    if (v.id === data.default_voice) o.selected = true;
    $("voice").appendChild(o);
  }
}

async function loadFormats() {
  const r = await fetch("/v1/engine");
  const data = await r.json();
  for (const f of data.formats.filter((f) => f !== "pcm")) {
    const o = el("option", f); o.value = f;
    $("format").appendChild(o);
  }
}

async function speak() {
  const started = performance.now();
  $("served").textContent = "…";
  const body = { model: "tts-1", input: $("text").value, voice: $("voice").value,
                 response_format: $("format").value, speed: parseFloat($("speed").value),
                 cache: $("bypass").checked ? "bypass" : "use" };
  const r = await fetch("/v1/audio/speech", {
    method: "POST", headers: { "Content-Type": "application/json", ...headers() },
    body: JSON.stringify(body) });
  if (!r.ok) {
    const err = await r.json();
    $("served").replaceChildren(el("span", `${r.status}: `, "error"));
    $("served").firstChild.id = "error";
    $("error").append(err.error.message);
    return;
  }
  const blob = await r.blob();
  const ms = (performance.now() - started).toFixed(1);
  const cache = r.headers.get("X-Cache"), tier = r.headers.get("X-Cache-Tier");
  const key = r.headers.get("X-Cache-Key");
  const badge = el("span", cache, `badge ${cache}`); badge.id = "xcache";
  const tierNode = el("b", tier); tierNode.id = "tier";
  const link = el("a", "stored entry"); link.id = "link"; link.href = "/v1/audio/" + key;
  const keyNode = el("code", key); keyNode.id = "key";
  $("served").replaceChildren(badge, " from ", tierNode, ` in ${ms} ms · ${blob.size} bytes · `,
                              link, el("br"), keyNode);
  $("player").src = URL.createObjectURL(blob);
  $("player").play().catch(() => {});
  refresh();
}

// -- charts ----------------------------------------------------------------------------
const PALETTE = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4b5563"];
window.vxCharts = {};

function chart(id, labels, yFormat, options = {}) {
  const box = $(id);
  const colors = labels.map((_, i) => PALETTE[i % PALETTE.length]);
  const opts = {
    width: Math.max(240, box.clientWidth), height: 200,
    scales: { x: { time: true }, y: options.scale || {} },
    series: [{}, ...labels.map((label, i) => ({
      label, stroke: colors[i], width: (options.widths || [])[i] || 2, spanGaps: false,
      dash: label.includes("p95") ? [6, 4] : undefined,
      value: (u, v) => v === null || v === undefined ? "–" : yFormat(v) }))],
    axes: [{}, { values: (u, ticks) => ticks.map(yFormat), size: 70,
                 ...(options.incrs ? { incrs: options.incrs } : {}) }],
    legend: { live: true },
  };
  const empty = [[], ...labels.map(() => [])];
  const u = new uPlot(opts, empty, box);
  u.vxColors = colors;
  window.vxCharts[id] = u;
  new ResizeObserver(() => u.setSize({ width: Math.max(240, box.clientWidth), height: 200 }))
    .observe(box);
  return u;
}

let charts = null;
let chartTiers = "";

function makeCharts(tiers) {
  for (const u of Object.values(window.vxCharts)) u.destroy();
  window.vxCharts = {};
  for (const id of ["chart-hit-rate", "chart-latency", "chart-ttfa", "chart-renders",
                    "chart-requests", "chart-storage"]) $(id).replaceChildren();
  const percent = (v) => v === null ? "–" : (100 * v).toFixed(0) + "%";
  const counts = { range: (u, min, max) => [0, Math.max(1, max || 0)] };
  charts = {
    hit: chart("chart-hit-rate", ["all tiers", ...tiers.map((t) => t)], percent,
               { scale: { range: [0, 1] }, widths: [5] }),  // visible under a tier's line
    latency: chart("chart-latency", ["hits p50", "hits p95", "misses p50", "misses p95"], secs,
                   { scale: { distr: 3 } }),
    ttfa: chart("chart-ttfa", ["p50", "p95"], secs, { scale: { distr: 3 } }),
    renders: chart("chart-renders", ["running", "queued"], (v) => int(v),
                   { scale: counts, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] }),
    requests: chart("chart-requests", ["hits", "misses", "refused", "errors"],
                    (v) => (v < 10 ? v.toFixed(1) : int(v)) + "/s", { scale: counts }),
    storage: chart("chart-storage", ["disk", "memory", "disk cap"], bytes),
  };
  chartTiers = tiers.join(",");
}

function drawCharts(doc) {
  const s = doc.series;
  if (!s) return;
  const tiers = doc.service.tiers.map((t) => t.name);
  if (!charts || chartTiers !== tiers.join(",")) makeCharts(tiers);
  // The cap as a line only once the disk is at least half full: drawn from the start, a
  // 5 GB line would flatten a few megabytes into the axis (the table shows the share).
  const disk = doc.storage.tiers.find((t) => t.tier === "disk");
  const cap = disk.max_bytes && disk.bytes >= disk.max_bytes / 2 ? disk.max_bytes : null;
  charts.hit.setData([s.t, s.hit_rate.all, ...tiers.map((t) => s.hit_rate[t] || s.t.map(() => null))]);
  charts.latency.setData([s.t, s.latency.hit_p50, s.latency.hit_p95, s.latency.miss_p50,
                          s.latency.miss_p95]);
  charts.ttfa.setData([s.t, s.latency.ttfa_p50, s.latency.ttfa_p95]);
  charts.renders.setData([s.t, s.running, s.queued]);
  const r = s.requests_per_second;
  charts.requests.setData([s.t, r.hits, r.misses, r.refused, r.errors]);
  charts.storage.setData([s.t, s.disk_bytes, s.memory_bytes, s.t.map(() => cap)]);
}

// -- figures ---------------------------------------------------------------------------
function row(table, cells, header = false) {
  return fill(table.insertRow(), cells, header);
}

// Sets a row's cells in place: a cell already holding the given node keeps it (and so a
// button under the pointer stays in the page; see drawTop).
function fill(tr, cells, header = false) {
  cells.forEach((cell, i) => {
    const td = tr.cells[i] || tr.appendChild(el(header ? "th" : "td"));
    const spec = cell instanceof Node ? { node: cell } :
      cell && typeof cell === "object" ? cell : { text: cell };
    td.className = spec.cls || "";
    if (!spec.node) td.textContent = spec.text ?? "";
    else if (td.childNodes.length !== 1 || td.firstChild !== spec.node) td.replaceChildren(spec.node);
  });
  while (tr.cells.length > cells.length) tr.deleteCell(-1);
  return tr;
}

function meter(value, cap) {
  const box = el("div", null, "bar");
  if (!cap) return el("small", "no cap");
  const fill = el("div");
  const share = Math.min(1, (value || 0) / cap);
  fill.style.width = (100 * share).toFixed(1) + "%";
  if (share >= 0.9) box.classList.add("full");
  box.title = `${(100 * share).toFixed(1)} % of ${bytes(cap)}`;
  box.append(fill);
  return box;
}

function drawService(doc) {
  const svc = doc.service;
  let text = `${svc.engine} · ${svc.model_revision}`;
  if (svc.upstream) text += ` · upstream ${svc.upstream.kind} ${svc.upstream.address}`;
  $("engine").textContent = text;
  $("tiers").replaceChildren();
  for (const t of svc.tiers || []) {
    const b = el("span", `${t.name} ${t.state}`, `badge ${t.state}`);
    b.title = t.detail || (t.durable ? "durable tier" : "this process's memory");
    b.dataset.tier = t.name;
    $("tiers").append(b, " ");
  }
  const workers = svc.workers || [];
  $("workers").textContent = workers.length ?
    `${workers.length} worker${workers.length > 1 ? "s" : ""}: ` +
    workers.map((w) => `pid ${w.pid} (${w.requests} requests)`).join(", ") : "";
}

function drawAdmin(doc) {
  const h = doc.hit_rate;
  $("hit-rate").textContent = pct(h.value);
  $("hit-rate").dataset.value = h.value === null ? "" : String(h.value);
  $("hit-rate").dataset.hits = h.hits; $("hit-rate").dataset.lookups = h.lookups;
  $("hit-detail").textContent = `${int(h.hits)} hits of ${int(h.lookups)} lookups · ` +
    `${int(h.joins)} joined a render`;
  $("hit-rate-recent").textContent = pct(h.recent);
  $("hit-tiers").textContent = Object.entries(h.by_tier).map(([t, n]) => `${t} ${int(n)}`)
    .join(" · ");
  const r = doc.renders;
  $("saved").textContent = secs(r.engine_seconds_saved);
  $("spent").textContent = `engine busy ${secs(r.engine_seconds_spent)} in ${int(r.ok)} renders` +
    (r.failed ? ` (${int(r.failed)} failed)` : "");
  $("renders").textContent = `${int(r.running)} / ${int(r.queued)}`;
  $("slots").textContent = `${int(r.slots)} slots, ${int(r.queue_limit)} may wait`;
  const routes = doc.requests.routes;
  const refused = routes.reduce((n, x) => n + x.refused, 0);
  const errors = routes.reduce((n, x) => n + x.errors, 0);
  $("refusals").textContent = `${int(refused)} · ${int(errors)}`;
  $("requests-total").textContent = `of ${int(doc.requests.total)} requests`;
  const st = doc.storage;
  $("corruptions").textContent = int(st.corruptions);
  const ev = Object.entries(st.evictions);
  $("evictions").textContent = ev.length ?
    "evicted: " + ev.map(([why, n]) => `${int(n)} ${why}`).join(", ") : "no evictions";
  const faults = Object.entries(st.faults);
  $("faults").textContent = faults.length ?
    "faults: " + faults.map(([name, n]) => `${name} ${int(n)}`).join(", ") : "";

  const table = $("storage");
  table.replaceChildren();
  row(table, ["tier / kind", { text: "entries", cls: "num" }, { text: "bytes", cls: "num" },
              "of cap"], true);
  for (const tier of st.tiers) {
    if (tier.tier === "disk") {
      row(table, [el("b", "disk"), { text: int(tier.entries), cls: "num" },
                  { text: bytes(tier.bytes), cls: "num" }, meter(tier.bytes, tier.max_bytes)]);
      if (tier.max_entries) {
        row(table, ["  entries cap", { text: int(tier.max_entries), cls: "num" }, "",
                    meter(tier.entries, tier.max_entries)]);
      }
    } else {
      const label = tier.workers > 1 ? `memory (${tier.workers} workers)` : "memory";
      row(table, [el("b", label), { text: int(tier.entries), cls: "num" },
                  { text: bytes(tier.bytes), cls: "num" }, ""]);
    }
    for (const k of tier.kinds || []) {
      row(table, ["  " + k.kind, { text: int(k.entries), cls: "num" },
                  { text: bytes(k.bytes), cls: "num" },
                  tier.tier === "memory" ? meter(k.bytes, k.budget) : ""]);
    }
  }

  const rt = $("routes");
  rt.replaceChildren();
  row(rt, ["route", { text: "requests", cls: "num" }, { text: "hits", cls: "num" },
           { text: "misses", cls: "num" }, { text: "4xx", cls: "num hide-narrow" },
           { text: "429/503", cls: "num" }, { text: "5xx", cls: "num" }], true);
  for (const x of routes) {
    row(rt, [x.route, { text: int(x.requests), cls: "num" }, { text: int(x.hits), cls: "num" },
             { text: int(x.misses), cls: "num" },
             { text: int(x.client_errors), cls: "num hide-narrow" },
             { text: int(x.refused), cls: x.refused ? "num error" : "num" },
             { text: int(x.errors), cls: x.errors ? "num error" : "num" }]);
  }
  drawCharts(doc);
}

function drawTenant(doc) {
  $("tenant-hit-rate").textContent = pct(doc.usage.hit_rate);
  $("tenant-asked").textContent = `${int(doc.usage.asked - doc.usage.missed)} heard from the ` +
    `cache of ${int(doc.usage.asked)} asked (tenant ${doc.tenant})`;
  $("tenant-entries").textContent = int(doc.storage.entries);
  $("tenant-bytes").textContent = bytes(doc.storage.bytes) + " · " +
    (doc.storage.kinds || []).map((k) => `${k.kind} ${int(k.entries)}`).join(", ");
}

// -- top phrases, warm and pin -----------------------------------------------------------
// A row's status survives the table being redrawn at every poll (kept by key).
const rowStatus = new Map();

function setStatus(key, text, cls = "") {
  rowStatus.set(key, { text, cls });
  for (const node of document.querySelectorAll("#top-misses tr")) {
    if (node.dataset.key === key) showStatus(node.querySelector("small.status"), key);
  }
}

function showStatus(status, key) {
  const kept = rowStatus.get(key) || { text: "", cls: "" };
  status.textContent = kept.text;
  status.className = "status " + kept.cls;
}

async function warm(item, pin) {
  setStatus(item.key, "rendering…");
  try {
    let key = item.key;
    if (!item.stored || !pin) {
      const r = await fetch("/v1/synthesize", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Voxcache-Priority": "background",
                   ...headers() },
        body: JSON.stringify({ ...item.request, response_format: "wav" }) });
      if (!r.ok) throw new Error(`${r.status}: ${(await r.json()).error.message}`);
      await r.arrayBuffer();
      key = r.headers.get("X-Cache-Key");
      setStatus(item.key, r.headers.get("X-Cache") === "HIT" ? "already stored" : "warmed", "ok");
    }
    if (pin) {
      const p = await fetch(`/v1/entries/${key}/pin`, { method: "PUT", headers: headers() });
      if (!p.ok) throw new Error(`pin ${p.status}: ${(await p.json()).error.message}`);
      setStatus(item.key, "pinned", "ok");
    }
  } catch (err) {
    setStatus(item.key, String(err.message || err), "error");
  }
}

// A table is redrawn at every poll, in place: a browser drops a click whose pressed element
// left the page before the release, so a row that still shows the same key keeps its
// buttons (which read the row's current item when clicked).
function drawTop(table, rows, missed) {
  fill(table.rows[0] || table.insertRow(),
       ["text", "voice", { text: missed ? "misses" : "hits", cls: "num" },
        { text: missed ? "engine s spent" : "engine s saved", cls: "num hide-narrow" },
        missed ? "" : { text: "pinned", cls: "hide-narrow" }], true);
  while (table.rows.length > Math.max(1, rows.length) + 1) table.deleteRow(-1);
  if (!rows.length) {
    const tr = table.rows[1] || table.insertRow();
    delete tr.dataset.key;
    fill(tr, [el("small", missed ? "no misses recorded yet" : "no hits recorded yet")]);
    return;
  }
  rows.forEach((item, i) => {
    const tr = table.rows[i + 1] || table.insertRow();
    const text = el("span", item.text);
    if (item.kind === "segment") text.append(el("span", "sentence", "tag"));
    if (item.pinned) text.append(el("span", "pinned", "tag"));
    const seconds = item.engine_seconds === null ? "–" :
      (item.engine_seconds_estimated ? "≈ " : "") + secs(item.engine_seconds);
    let last = { text: item.pinned ? "yes" : "", cls: "hide-narrow" };
    if (missed) {
      if (tr.dataset.key !== item.key || !tr.actions) tr.actions = rowActions(tr);
      showActions(tr.actions, item);
      last = { node: tr.actions, cls: "actions" };
    }
    tr.item = item;
    tr.dataset.key = item.key;
    fill(tr, [{ node: text, cls: "text" }, item.voice || "",
              { text: int(missed ? item.missed : item.hits), cls: "num" },
              { text: seconds, cls: "num hide-narrow" }, last]);
  });
}

function rowActions(tr) {
  const actions = el("span");
  for (const pin of [false, true]) {
    const button = el("button", pin ? "pin" : "warm", pin ? "small pin" : "small warm");
    button.addEventListener("click", () => warm(tr.item, pin));
    actions.append(button, " ");
  }
  actions.append(el("small", "", "status"));
  return actions;
}

function showActions(actions, item) {
  for (const button of actions.querySelectorAll("button")) {
    const pin = button.classList.contains("pin");
    button.disabled = !item.can_warm;
    button.title = item.can_warm ? (pin ? "render if needed, then pin (never evicted)" :
      "render now at background priority") : item.why_not;
  }
  showStatus(actions.querySelector("small.status"), item.key);
}

// -- polling ---------------------------------------------------------------------------
let pollTimer = null;

async function refresh() {
  let doc;
  try {
    const r = await fetch("/v1/dashboard", { headers: headers() });
    doc = await r.json();
    if (!r.ok) {
      $("dash-error").style.display = "block";
      $("dash-error").replaceChildren(el("span", `${r.status}: ${doc.error.message}`, "error"));
      show(null);
      return schedule(5);
    }
  } catch (err) {
    $("dash-error").style.display = "block";
    $("dash-error").replaceChildren(el("span", `dashboard: ${err}`, "error"));
    return schedule(5);
  }
  $("dash-error").style.display = "none";
  drawService(doc);
  const admin = doc.scope === "admin";
  show(admin);
  if (admin) drawAdmin(doc); else drawTenant(doc);
  drawTop($("top-misses"), doc.top_misses, true);
  drawTop($("top-hits"), doc.top_hits, false);
  drawGate(doc);
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  document.body.dataset.refreshed = String(Date.now());
  schedule(Math.max(1, doc.interval));
}

function show(admin) {
  // null: nothing to show (the key was refused)
  for (const node of document.querySelectorAll(".admin-only")) node.hidden = admin !== true;
  for (const node of document.querySelectorAll(".tenant-only")) node.hidden = admin !== false;
  $("tops").hidden = admin === null;
  $("gate").hidden = admin === null;
}

// -- the savings ledger and the storing gate (docs/operating/admission.md) ------------------------
function drawGate(doc) {
  const s = doc.savings || { rows: [], total: {}, currency: "" };
  const table = $("savings");
  table.replaceChildren();
  row(table, ["tenant", "voice", "hits", "characters", "engine s", s.currency], true);
  for (const r of s.rows) {
    row(table, [r.tenant, r.voice, { text: int(r.hits), cls: "num" },
                { text: int(r.chars), cls: "num" }, { text: r.seconds.toFixed(2), cls: "num" },
                { text: r.money.toFixed(4), cls: "num" }]);
  }
  const t = s.total || {};
  $("savings-total").textContent = `total: ${int(t.hits || 0)} hits, ` +
    `${(t.seconds || 0).toFixed(1)} engine seconds, ${(t.money || 0).toFixed(2)} ${s.currency}`;
  const g = doc.refusals || { by_reason: {}, recent: [] };
  const reasons = $("not-stored");
  reasons.replaceChildren();
  row(reasons, ["not stored because", "takes"], true);
  for (const [reason, n] of Object.entries(g.by_reason)) {
    row(reasons, [reason, { text: int(n), cls: "num" }]);
  }
  const keys = $("refused-keys");
  keys.replaceChildren();
  if (g.recent.length) row(keys, ["key", "reason", "times"], true);
  for (const r of g.recent) {
    row(keys, [{ text: r.key.slice(0, 16), cls: "mono" }, r.reason,
               { text: int(r.times), cls: "num" }]);
  }
}

function schedule(seconds) {
  clearTimeout(pollTimer);
  pollTimer = setTimeout(refresh, seconds * 1000);
}

$("apikey").value = localStorage.getItem("voxcache-key") || "";
$("apikey").addEventListener("change", () => {
  localStorage.setItem("voxcache-key", $("apikey").value); loadVoices(); refresh();
});
$("speak").addEventListener("click", speak);
loadFormats(); loadVoices(); refresh();
