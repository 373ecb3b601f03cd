// slaq's page: polls the scheduler's JSON (api/v1/overview every epoch, api/v1/jobs/<id> for
// the chosen job) and draws it. Read-only; no framework; charts by uPlot. The next poll is set
// only when the last has been drawn, so a slow page never piles requests on the scheduler.
"use strict";

const token = new URLSearchParams(location.search).get("token");
const headers = token ? { Authorization: "Bearer " + token } : {};
const $ = (id) => document.getElementById(id);
const state = { sort: "job", desc: false, chosen: null, overview: null, charts: {}, lastOk: 0, drawn: false };

const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const num = (v, digits) => (v === null || v === undefined || Number.isNaN(v) ? "" : Number(v).toPrecision(digits));

async function getJson(path) {
  const response = await fetch(path, { headers, cache: "no-store" });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(response.status + ": " + (body.error || response.statusText));
  return body;
}

function chosenFromHash() {
  const m = location.hash.match(/^#job=(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

// --- the cluster -------------------------------------------------------------------------

function drawSummary(o) {
  const busy = o.jobs.reduce((n, j) => n + j.workers, 0);
  const who = o.leader ? ` · leader ${esc(o.leader)}` : "";
  $("summary").innerHTML = `epoch <b>${o.epoch}</b> · policy <b>${esc(o.policy)}</b> · <b>${o.num_jobs}</b> jobs · ` +
    `<b>${busy}</b> of <b>${o.num_workers}</b> workers busy · state ${esc(o.state || "none")}${who}`;
}

function drawTypes(o) {
  const types = Object.keys(o.accelerators || {}).length
    ? Object.entries(o.accelerators)
    : [["workers", { workers: o.num_workers, busy: o.jobs.reduce((n, j) => n + j.workers, 0) }]];
  $("types").innerHTML = types.map(([name, u]) => {
    const share = u.workers ? (100 * u.busy) / u.workers : 0;
    return `<div class="card" data-type="${esc(name)}">${esc(name)}<br><b>${u.busy}</b> / ${u.workers} busy` +
      `<div class="bar"><span style="width:${share.toFixed(1)}%"></span></div></div>`;
  }).join("");
}

function drawTenants(o) {
  const rows = Object.entries(o.tenants || {});
  $("tenants").hidden = rows.length === 0;
  $("tenants").tBodies[0].innerHTML = rows.map(([name, t]) =>
    `<tr data-tenant="${esc(name)}"><td>${esc(name)}</td><td>${t.workers}</td><td>${t.guaranteed}</td><td>${t.quota}</td>` +
    `<td>${t.borrowed}</td><td>${t.lent}</td><td>${t.jobs}</td><td>${t.waiting}</td></tr>`).join("");
}

function drawTimeline(o) {
  const t = o.timeline || [];
  const data = [t.map((e) => e.epoch), t.map((e) => e.moved), t.map((e) => e.total_ms)];
  chart("timeline", $("timeline"), 160, data, () => ({
    scales: { x: { time: false }, ms: {} },
    series: [{ label: "epoch" }, { label: "workers moved", stroke: "#2f6fde", width: 1.5 },
      { label: "epoch ms", stroke: "#c2410c", scale: "ms", width: 1 }],
    axes: [{}, { label: "moved" }, { scale: "ms", side: 1, label: "ms", grid: { show: false } }],
  }));
}

// --- the jobs ----------------------------------------------------------------------------

function sortedJobs(o) {
  const key = state.sort, sign = state.desc ? -1 : 1;
  const filter = $("filter").value.trim().toLowerCase();
  const jobs = filter ? o.jobs.filter((j) => j.job.toLowerCase().includes(filter) || (j.tenant || "").includes(filter)) : o.jobs.slice();
  return jobs.sort((a, b) => {
    const x = a[key], y = b[key];
    if (x === y) return a.job < b.job ? -1 : 1;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * sign;
  });
}

function drawJobs(o) {
  const jobs = sortedJobs(o);
  $("jobs-count").textContent = `${jobs.length} of ${o.num_jobs}`;
  const rows = new Array(jobs.length);
  for (let i = 0; i < jobs.length; i++) {
    const j = jobs[i];
    const chosen = j.job === state.chosen ? ' class="chosen"' : "";
    rows[i] = `<tr data-job="${esc(j.job)}"${chosen}><td>${esc(j.job)}</td><td>${esc(j.tenant || "")}</td>` +
      `<td>${num(j.last_loss, 4)}</td><td>${num(j.predicted_gain, 3)}</td><td>${j.workers}</td><td>${j.generation}</td>` +
      `<td>${j.restarts}</td><td>${j.slowdown ? j.slowdown.toFixed(2) + "×" : ""}</td><td>${j.points}</td></tr>`;
  }
  $("jobs").tBodies[0].innerHTML = rows.join("");
  for (const th of $("jobs").tHead.rows[0].cells) {
    th.className = th.dataset.key === state.sort ? (state.desc ? "desc" : "asc") : "";
  }
}

// --- the chosen job ----------------------------------------------------------------------

// Every x of the history, the fit and the forecast, with each series null where it has none.
function mergeSeries(c) {
  const xs = [...new Set([...c.iter, ...c.fit_iter, ...c.forecast_iter])].sort((a, b) => a - b);
  const at = new Map(xs.map((x, i) => [x, i]));
  const column = (keys, values) => {
    const out = new Array(xs.length).fill(null);
    keys.forEach((k, i) => { out[at.get(k)] = values[i]; });
    return out;
  };
  return [xs, column(c.iter, c.loss), column(c.fit_iter, c.fit_loss), column(c.forecast_iter, c.forecast_loss)];
}

// Vertical lines where a generation started: restarts in orange, other new memberships in grey.
function generationMarks(c, restarted) {
  return (u) => {
    const ctx = u.ctx;
    ctx.save();
    for (const g of c.generations) {
      if (g.generation <= 1) continue;
      const x = u.valToPos(g.iter, "x", true);
      if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
      const restart = restarted.includes(g.generation);
      ctx.strokeStyle = restart ? "#c2410c" : "#b8c0c8";
      ctx.lineWidth = restart ? 2 : 1;
      ctx.setLineDash(restart ? [] : [4, 4]);
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
    }
    ctx.restore();
  };
}

function drawJob(view) {
  const s = view.status, c = view.curve;
  $("job-name").textContent = s.job;
  const facts = [`${s.workers} workers`, `generation ${s.generation}`, `${s.restarts} restarts`, `${s.points} points`];
  if (c && c.model) facts.push(`fit: ${c.model}`);
  if (c && c.seconds_per_iter) facts.push(`${c.seconds_per_iter.toPrecision(3)} s/iteration now`);
  if (s.slowdown) facts.push(`slowdown ≥ ${s.slowdown.toFixed(2)}× its fair finish`);
  if (view.no_curve) facts.push(view.no_curve);
  $("job-facts").textContent = facts.join(" · ");
  const box = $("job-loss");
  if (!c) {
    box.dataset.points = "0";
    return;
  }
  const restarted = s.restarted || [];
  const data = mergeSeries(c);
  // Losses spanning orders of magnitude read best on a log scale (all positive only).
  const positive = c.loss.length > 0 && c.loss.every((v) => v > 0) && c.fit_loss.concat(c.forecast_loss).every((v) => v > 0);
  if (state.charts.loss && state.logLoss !== positive) { state.charts.loss.destroy(); delete state.charts.loss; }
  state.logLoss = positive;
  chart("loss", box, 260, data, () => ({
    scales: { x: { time: false }, y: positive ? { distr: 3 } : {} },
    axes: [{ label: "iteration" }, { label: "loss", size: 70, values: (u, vals) => vals.map((v) => num(v, 3)) }],
    series: [{ label: "iteration" },
      { label: "loss", stroke: "#1d2329", width: 1, points: { show: true, size: 3 } },
      { label: "fitted", stroke: "#2f6fde", width: 2, spanGaps: true, points: { show: false } },
      { label: "predicted", stroke: "#2f6fde", width: 2, dash: [6, 4], spanGaps: true, points: { show: false } }],
    hooks: { draw: [(u) => state.marks && state.marks(u)] },
  }));
  state.marks = generationMarks(c, restarted);
  state.charts.loss.redraw(false, false);
  box.dataset.job = s.job;
  box.dataset.points = String(state.charts.loss.data[1].filter((v) => v !== null).length);
  box.dataset.history = String(c.iter.length);
  const timed = c.at_ms.map((t, i) => [t, c.workers[i]]).filter(([t]) => t !== null);
  chart("workers", $("job-workers"), 120, [timed.map(([t]) => t / 1000), timed.map(([, w]) => w)], () => ({
    series: [{ label: "time" }, { label: "workers", stroke: "#2f6fde", width: 1.5, paths: uPlot.paths.stepped({ align: 1 }) }],
    axes: [{}, { label: "workers" }],
  }));
}

// Makes or updates chart `name` in `el` (its options made once, by `options`).
function chart(name, el, height, data, options) {
  const existing = state.charts[name];
  if (existing && existing.series.length === data.length) {
    existing.setData(data);
    return existing;
  }
  if (existing) existing.destroy();
  const opts = Object.assign({ width: Math.max(300, el.clientWidth - 4), height, legend: { live: false } }, options());
  state.charts[name] = new uPlot(opts, data, el);
  return state.charts[name];
}

// --- the loop ----------------------------------------------------------------------------

async function refresh() {
  let period = 1000;
  try {
    const o = await getJson("api/v1/overview");
    state.overview = o;
    period = Math.max(o.period_ms || 1000, 1000);
    drawSummary(o); drawTypes(o); drawTenants(o); drawTimeline(o); drawJobs(o);
    if (state.chosen) {
      try {
        drawJob(await getJson("api/v1/jobs/" + encodeURIComponent(state.chosen)));
      } catch (e) {
        $("job-facts").textContent = `${state.chosen}: ${e.message}`;
      }
    }
    state.lastOk = Date.now();
    $("health").textContent = "updated " + new Date().toLocaleTimeString();
    $("health").className = "health";
    if (!state.drawn) {
      state.drawn = true;
      document.body.dataset.firstDrawMs = performance.now().toFixed(0);
    }
    document.body.dataset.epoch = String(o.epoch);
  } catch (e) {
    $("health").textContent = "not updated: " + e.message;
    $("health").className = "health stale";
  }
  setTimeout(refresh, period);
}

$("jobs").tHead.addEventListener("click", (e) => {
  const key = e.target.dataset && e.target.dataset.key;
  if (!key) return;
  state.desc = state.sort === key ? !state.desc : key !== "job" && key !== "tenant";
  state.sort = key;
  if (state.overview) drawJobs(state.overview);
});
$("jobs").tBodies[0].addEventListener("click", (e) => {
  const row = e.target.closest("tr");
  if (row && row.dataset.job) location.hash = "job=" + encodeURIComponent(row.dataset.job);
});
$("filter").addEventListener("input", () => state.overview && drawJobs(state.overview));
window.addEventListener("hashchange", async () => {
  state.chosen = chosenFromHash();
  if (state.overview) drawJobs(state.overview);
  if (state.chosen) {
    try { drawJob(await getJson("api/v1/jobs/" + encodeURIComponent(state.chosen))); } catch (e) { $("job-facts").textContent = e.message; }
  }
});
state.chosen = chosenFromHash();
refresh();
