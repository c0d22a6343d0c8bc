// The web console page (server/console/console.h): one static HTML document with inline CSS and
// JavaScript, no external resources, reading the console's JSON endpoints.
#include "server/console/console.h"

namespace verity::server {

const char kConsolePage[] = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Verity console</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .6em; }
h2 { font-size: 1.15em; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; margin-bottom: .8em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f2f2f2; }
td.text, th.text { text-align: left; }
tr.clickable { cursor: pointer; }
tr.clickable:hover { background: #eef4ff; }
tr.selected { background: #dde8ff; }
th.sortable { cursor: pointer; user-select: none; }
th.sortable:hover { background: #e4e4e4; }
#histogram { display: flex; align-items: flex-end; height: 140px; gap: 4px; border-bottom: 1px solid #999; }
#histogram .bar { width: 36px; background: #4a7bd0; position: relative; }
#histogram .bar span { position: absolute; top: -1.3em; width: 100%; text-align: center; font-size: 11px; }
#histogram-axis { display: flex; gap: 4px; font-size: 11px; color: #555; }
#histogram-axis div { width: 36px; text-align: center; }
#confusion td.cell { width: 3.2em; text-align: center; }
.muted { color: #777; }
.error { color: #b00; }
#project, #annotator { display: none; }
#refresh-bar { margin: 0 0 .6em; color: #555; }
#refresh-bar button { margin-left: .6em; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; }
.chart h3 { font-size: 1em; margin: .4em 0; }
svg.plot { background: #fafafa; border: 1px solid #ddd; }
svg.plot text { font-size: 10px; fill: #555; }
svg.plot .axis { stroke: #999; stroke-width: 1; }
svg.plot .line { fill: none; stroke: #4a7bd0; stroke-width: 1.5; }
svg.plot circle.point { fill: #4a7bd0; }
svg.plot .diagonal { stroke: #aaa; stroke-dasharray: 4 3; }
svg.plot rect.bin { fill: rgba(74, 123, 208, .25); stroke: #4a7bd0; }
svg.plot circle.annotator { fill: #d0734a; cursor: pointer; }
</style>
</head>
<body>
<h1>Verity console</h1>
<div id="refresh-bar"><span id="updated-at">Loading…</span><button id="refresh-toggle"
  type="button">Pause</button> <span class="muted">(refreshes every 5 s; links to a project or an
  annotator can be bookmarked)</span></div>
<div id="error" class="error"></div>
<form id="key-form" style="display: none">
  <p>This server has authentication on: the console needs an API key (reader or above). It
  shows the projects the key may read, and is kept in this tab only (sessionStorage).</p>
  <label>API key <input id="api-key" type="password" autocomplete="off" size="48"></label>
  <button type="submit">Use key</button>
</form>
<section id="list">
  <h2>Projects</h2>
  <table id="projects">
    <thead><tr><th class="text">Project</th><th class="text">Classes</th><th>Items</th>
      <th>Annotators</th><th>Labels</th><th>Labels/s</th><th class="text">Model</th></tr></thead>
    <tbody></tbody>
  </table>
</section>
<section id="project">
  <h2 id="project-title"></h2>
  <div id="project-summary"></div>
  <div class="charts">
    <div class="chart"><h3>Ingest rate (labels/s)</h3><div id="ingest-chart"></div></div>
    <div class="chart"><h3>Resolved share</h3><div id="resolved-chart"></div></div>
  </div>
  <div class="muted">Sampled by the server every 5 s, the last hour kept in memory.</div>
  <h2>Posterior confidence</h2>
  <div id="histogram"></div>
  <div id="histogram-axis"></div>
  <h2>Reliability on gold items</h2>
  <div class="muted">The model's posterior of each gold item from its labels alone (its gold
    label held out): accuracy per confidence bin against the diagonal of perfect calibration.</div>
  <div id="reliability-summary"></div>
  <div id="reliability-chart"></div>
  <h2>Assignment</h2>
  <div id="assignment"></div>
  <h2>Model versions</h2>
  <table id="versions">
    <thead><tr><th>Version</th><th class="text">Method</th><th>Labels</th><th>Log-likelihood</th>
      <th>Iterations</th><th>Training (ms)</th><th class="text">Created</th></tr></thead>
    <tbody></tbody>
  </table>
  <h2>Annotators</h2>
  <table id="annotators">
    <thead><tr><th class="text sortable" data-key="id">Annotator</th>
      <th class="sortable" data-key="labels">Labels</th>
      <th class="sortable" data-key="accuracy">Estimated accuracy</th>
      <th class="sortable" data-key="spam_score">Spam score</th></tr></thead>
    <tbody></tbody>
  </table>
  <div id="spam-note" class="muted"></div>
  <div id="annotators-note" class="muted"></div>
  <h2>Annotator embeddings</h2>
  <div id="embedding-summary" class="muted"></div>
  <div id="embedding-map"></div>
</section>
<section id="annotator">
  <h2 id="annotator-title"></h2>
  <div class="muted">Rows: true class; columns: the label given. P(label | true class).</div>
  <table id="confusion"></table>
</section>
<script>
"use strict";
const state = { project: null, annotator: null, annotators: [], classes: [],
                sortKey: "labels", sortDescending: true, paused: false };
const kRefreshMs = 5000;
const kSvg = "http://www.w3.org/2000/svg";

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}
function svg(tag, attributes, text) {
  const node = document.createElementNS(kSvg, tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = String(text);
  return node;
}
function fixed(x, digits) { return x === null || x === undefined ? "–" : Number(x).toFixed(digits); }
const kKeyItem = "verity_api_key";
async function getJson(path) {
  const headers = {};
  const key = sessionStorage.getItem(kKeyItem);
  if (key) headers["Authorization"] = "Bearer " + key;
  const response = await fetch(path, { cache: "no-store", headers: headers });
  const body = await response.json();
  if (response.status === 401) {
    // No key, or one the server refused: ask for one.
    if (key) sessionStorage.removeItem(kKeyItem);
    document.getElementById("key-form").style.display = "block";
  }
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}
document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const key = document.getElementById("api-key").value.trim();
  if (!key) return;
  sessionStorage.setItem(kKeyItem, key);
  document.getElementById("api-key").value = "";
  document.getElementById("key-form").style.display = "none";
  document.getElementById("error").textContent = "";
  show().catch(showError);
});
function showError(e) { document.getElementById("error").textContent = String(e.message || e); }

// Hash routes: #/projects/NAME and #/projects/NAME/annotators/ID (each part URI-encoded).
function parseRoute(hash) {
  const m = /^#\/projects\/([^\/]+)(?:\/annotators\/([^\/]+))?\/?$/.exec(hash);
  if (!m) return { project: null, annotator: null };
  return { project: decodeURIComponent(m[1]),
           annotator: m[2] === undefined ? null : decodeURIComponent(m[2]) };
}
function projectHash(name) { return "#/projects/" + encodeURIComponent(name); }
function annotatorHash(name, id) { return projectHash(name) + "/annotators/" + encodeURIComponent(id); }

// Renders what the URL names. `navigated`: the user (or a link) changed the URL, rather than a
// periodic refresh, so the view may scroll to the annotator.
async function show(navigated) {
  const route = parseRoute(location.hash);
  await loadProjects(route.project);
  if (route.project === null) {
    state.project = null;
    document.getElementById("project").style.display = "none";
    document.getElementById("annotator").style.display = "none";
  } else {
    await openProject(route.project);
    if (route.annotator === null) {
      state.annotator = null;
      document.getElementById("annotator").style.display = "none";
      for (const row of document.querySelectorAll("#annotators tbody tr")) row.classList.remove("selected");
    } else {
      const a = state.annotators.find((x) => x.id === route.annotator);
      if (a === undefined) {
        throw new Error(state.annotatorsTotal > state.annotators.length
            ? "annotator \"" + route.annotator + "\" is not among the " + state.annotators.length +
                  " annotators with the most labels that the console lists for project " +
                  route.project + " (GetAnnotatorProfiles has every annotator)"
            : "no annotator \"" + route.annotator + "\" in project " + route.project);
      }
      openAnnotator(a, navigated);
    }
  }
  document.getElementById("error").textContent = "";
  // A periodic refresh that was under way when the user paused leaves the line alone: paused,
  // it keeps saying when the page last refreshed on its own.
  if (navigated || !state.paused) {
    document.getElementById("updated-at").textContent =
        "Updated at " + new Date().toLocaleTimeString() + (state.paused ? " (paused)" : "");
  }
}
window.addEventListener("hashchange", () => show(true).catch(showError));
document.getElementById("refresh-toggle").addEventListener("click", () => {
  state.paused = !state.paused;
  document.getElementById("refresh-toggle").textContent = state.paused ? "Resume" : "Pause";
  const updated = document.getElementById("updated-at");
  updated.textContent = updated.textContent.replace(/ \(paused\)$/, "") + (state.paused ? " (paused)" : "");
  if (!state.paused) show(false).catch(showError);
});

async function loadProjects(selected) {
  const data = await getJson("/api/projects");
  const body = document.querySelector("#projects tbody");
  body.replaceChildren();
  for (const p of data.projects) {
    const row = el("tr", null, "clickable");
    row.dataset.project = p.name;
    if (p.name === selected) row.classList.add("selected");
    row.append(el("td", p.name, "text"), el("td", p.classes.join(", "), "text"),
               el("td", p.items), el("td", p.annotators), el("td", p.labels),
               el("td", fixed(p.labels_per_second, 2)),
               el("td", (p.model_version > 0 ? p.model_method + " v" + p.model_version
                                             : "majority vote (no fit yet)") +
                            (p.loaded ? "" : " (unloaded while idle)"), "text"));
    row.addEventListener("click", () => { location.hash = projectHash(p.name); });
    body.append(row);
  }
  if (data.projects.length === 0) {
    const row = el("tr");
    const cell = el("td", "No projects yet.", "text muted");
    cell.colSpan = 7;
    row.append(cell);
    body.append(row);
  }
}

async function openProject(name) {
  state.project = name;
  const path = "/api/projects/" + encodeURIComponent(name);
  const [project, annotators] = await Promise.all([getJson(path), getJson(path + "/annotators")]);
  document.getElementById("project").style.display = "block";
  document.getElementById("project-title").textContent = "Project " + project.name;
  document.getElementById("project-summary").textContent =
      project.items + " items, " + project.annotators + " annotators, " + project.labels +
      " labels (" + project.labels_since_version + " since the model version); method " +
      project.method + ", serving " +
      (project.model_version > 0 ? project.model_method + " v" + project.model_version
                                 : "majority vote") + (project.training ? " (training)" : "") +
      (project.chosen_method ? "; auto chose " + project.chosen_method + ": " +
                                   project.choice_reason : "");
  const h = project.history;
  lineChart(document.getElementById("ingest-chart"), h.time_ms, h.labels_per_second, null,
            (v) => fixed(v, 1));
  lineChart(document.getElementById("resolved-chart"), h.time_ms, h.resolved_share, 1,
            (v) => fixed(100 * v, 0) + "%",
            project.assignment.resolved_items === null
                ? "Resolution not defined (no confidence target or label cap)." : null);
  renderHistogram(project.confidence_histogram);
  renderReliability(project);
  const a = project.assignment;
  document.getElementById("assignment").textContent =
      (a.resolved_items === null
           ? "Resolution not defined (no confidence target or label cap)."
           : a.resolved_items + " items resolved (" + fixed(100 * a.resolved_share, 1) + "%), " +
             a.open_items + " open.") +
      " " + a.outstanding_leases + " outstanding leases on " + a.items_with_leases + " items.";
  const versions = document.querySelector("#versions tbody");
  versions.replaceChildren();
  for (const v of project.versions) {
    const row = el("tr");
    row.append(el("td", v.version), el("td", v.method, "text"), el("td", v.num_labels),
               el("td", fixed(v.log_likelihood, 2)), el("td", v.iterations),
               el("td", fixed(v.duration_ms, 1)), el("td", v.created_at, "text"));
    versions.append(row);
  }
  if (project.versions.length === 0) {
    const row = el("tr");
    const cell = el("td", "No model version yet.", "text muted");
    cell.colSpan = 7;
    row.append(cell);
    versions.append(row);
  }
  state.classes = annotators.classes;
  state.annotators = annotators.annotators;
  state.annotatorsTotal = annotators.annotators_total;
  document.getElementById("spam-note").textContent = annotators.spam_scores
      ? "Spam score: mace's 1 − θ, the chance that the annotator labels at random."
      : "Spam scores come from the mace method; this model (" + project.model_method +
        ") gives none.";
  document.getElementById("annotators-note").textContent =
      annotators.annotators_total > annotators.annotators.length
          ? "Showing the " + annotators.annotators.length + " annotators with the most labels of " +
                annotators.annotators_total + "; GetAnnotatorProfiles pages through all of them."
          : "";
  renderAnnotators();
  renderEmbeddings(annotators);
}

// A line over time: `values` (null where undefined) at `times` (Unix ms), y from 0 to yMax
// (null: the largest value).
function lineChart(container, times, values, yMax, format, note) {
  const width = 460, height = 170, left = 48, right = 12, top = 10, bottom = 24;
  const plot = svg("svg", { width: width, height: height, class: "plot" });
  container.replaceChildren(plot);
  const points = [];
  values.forEach((v, i) => { if (v !== null) points.push([times[i], v]); });
  if (note || points.length === 0) {
    plot.append(svg("text", { x: 10, y: height / 2 },
                    note || "No samples yet (one every 5 s)."));
    return;
  }
  const t0 = times[0], t1 = Math.max(times[times.length - 1], t0 + 1000);
  // All zero (no labels arriving): a scale of 1 rather than none.
  const largest = Math.max(...points.map((p) => p[1]));
  const top_value = yMax !== null ? yMax : largest > 0 ? largest : 1;
  const x = (t) => left + (width - left - right) * (t - t0) / (t1 - t0);
  const y = (v) => height - bottom - (height - top - bottom) * v / top_value;
  plot.append(svg("line", { x1: left, y1: height - bottom, x2: width - right, y2: height - bottom, class: "axis" }),
              svg("line", { x1: left, y1: top, x2: left, y2: height - bottom, class: "axis" }),
              svg("text", { x: 2, y: top + 8 }, format(top_value)),
              svg("text", { x: 2, y: height - bottom }, format(0)),
              svg("text", { x: left, y: height - 6 }, new Date(t0).toLocaleTimeString()),
              svg("text", { x: width - right - 60, y: height - 6 }, new Date(t1).toLocaleTimeString()));
  // A gap in the values breaks the line.
  let d = "", previous = false;
  values.forEach((v, i) => {
    if (v === null) { previous = false; return; }
    d += (previous ? " L " : " M ") + x(times[i]).toFixed(1) + " " + y(v).toFixed(1);
    previous = true;
  });
  plot.append(svg("path", { d: d.trim(), class: "line" }));
  for (const [t, v] of points) {
    const dot = svg("circle", { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.5, class: "point" });
    dot.append(svg("title", {}, new Date(t).toLocaleTimeString() + ": " + format(v)));
    plot.append(dot);
  }
}

function renderReliability(project) {
  const summary = document.getElementById("reliability-summary");
  const container = document.getElementById("reliability-chart");
  container.replaceChildren();
  const r = project.reliability;
  if (r === null) {
    summary.textContent = project.gold_items === 0
        ? "No gold items: add some (verity item add --gold_csv) to see how well the served confidence is calibrated."
        : project.gold_items + " gold items, none with labels yet.";
    return;
  }
  summary.textContent = r.count + " of " + project.gold_items + " gold items with labels: accuracy " +
      fixed(r.accuracy, 3) + ", expected calibration error " + fixed(r.expected_calibration_error, 3) + ".";
  const size = 240, margin = 30;
  const plot = svg("svg", { width: size + 2 * margin, height: size + 2 * margin, class: "plot" });
  const x = (v) => margin + size * v, y = (v) => margin + size * (1 - v);
  plot.append(svg("line", { x1: x(0), y1: y(0), x2: x(1), y2: y(0), class: "axis" }),
              svg("line", { x1: x(0), y1: y(0), x2: x(0), y2: y(1), class: "axis" }),
              svg("line", { x1: x(0), y1: y(0), x2: x(1), y2: y(1), class: "diagonal" }),
              svg("text", { x: x(0.35), y: size + 2 * margin - 6 }, "confidence"),
              svg("text", { x: 2, y: y(1) + 4 }, "1"), svg("text", { x: 2, y: y(0) }, "0"),
              svg("text", { x: 2, y: margin - 12 }, "accuracy"));
  for (const bin of r.bins) {
    if (bin.count === 0) continue;
    const rect = svg("rect", { x: x(bin.low) + 1, y: y(bin.accuracy), width: size * (bin.high - bin.low) - 2,
                               height: size * bin.accuracy, class: "bin" });
    rect.append(svg("title", {}, bin.count + " items, confidence " + fixed(bin.mean_confidence, 2) +
                                 ", accuracy " + fixed(bin.accuracy, 2)));
    plot.append(rect, svg("circle", { cx: x(bin.mean_confidence), cy: y(bin.accuracy), r: 3, class: "point" }));
  }
  container.append(plot);
}

function renderEmbeddings(data) {
  const summary = document.getElementById("embedding-summary");
  const container = document.getElementById("embedding-map");
  container.replaceChildren();
  const placed = data.annotators.filter((a) => a.embedding_2d !== null);
  if (data.embedding_dim === 0 || placed.length === 0) {
    summary.textContent = "This model learns no annotator embeddings (lia and conal do).";
    return;
  }
  summary.textContent = placed.length + " annotators' " + data.embedding_dim +
      "-dimensional embeddings on their first two principal components; click one to open it.";
  const size = 320, margin = 16;
  const xs = placed.map((a) => a.embedding_2d[0]), ys = placed.map((a) => a.embedding_2d[1]);
  const span = (v) => Math.max(1e-9, Math.max(...v) - Math.min(...v));
  const x = (v) => margin + size * (v - Math.min(...xs)) / span(xs);
  const y = (v) => margin + size * (1 - (v - Math.min(...ys)) / span(ys));
  const plot = svg("svg", { width: size + 2 * margin, height: size + 2 * margin, class: "plot" });
  plot.append(svg("text", { x: margin + size / 2 - 30, y: size + 2 * margin - 3 }, "1st component"),
              svg("text", { x: 2, y: 10 }, "2nd component"));
  for (const a of placed) {
    const dot = svg("circle", { cx: x(a.embedding_2d[0]).toFixed(1), cy: y(a.embedding_2d[1]).toFixed(1),
                                r: 4, class: "annotator" });
    dot.dataset.annotator = a.id;
    if (a.id === parseRoute(location.hash).annotator) dot.setAttribute("r", 7);
    dot.append(svg("title", {}, a.id + ": accuracy " + fixed(a.accuracy, 3)));
    dot.addEventListener("click", () => { location.hash = annotatorHash(state.project, a.id); });
    plot.append(dot);
  }
  container.append(plot);
}

function renderHistogram(h) {
  const bars = document.getElementById("histogram");
  const axis = document.getElementById("histogram-axis");
  bars.replaceChildren();
  axis.replaceChildren();
  const max = Math.max(1, ...h.counts);
  const width = (h.high - h.low) / h.counts.length;
  h.counts.forEach((count, i) => {
    const bar = el("div", null, "bar");
    bar.style.height = (100 * count / max) + "%";
    bar.title = count + " items with confidence in [" + fixed(h.low + i * width, 2) + ", " +
                fixed(h.low + (i + 1) * width, 2) + ")";
    bar.append(el("span", count));
    bars.append(bar);
    axis.append(el("div", fixed(h.low + i * width, 2)));
  });
}

function renderAnnotators() {
  const key = state.sortKey;
  const sign = state.sortDescending ? -1 : 1;
  // Nulls (no spam score) sort last either way.
  const rows = state.annotators.slice().sort((x, y) =>
      x[key] === null ? (y[key] === null ? 0 : 1) : y[key] === null ? -1 :
      sign * (x[key] < y[key] ? -1 : x[key] > y[key] ? 1 : 0));
  const body = document.querySelector("#annotators tbody");
  body.replaceChildren();
  for (const a of rows) {
    const row = el("tr", null, "clickable");
    row.dataset.annotator = a.id;
    if (a.id === state.annotator) row.classList.add("selected");
    row.append(el("td", a.id, "text"), el("td", a.labels), el("td", fixed(a.accuracy, 3)),
               el("td", fixed(a.spam_score, 3)));
    row.addEventListener("click", () => { location.hash = annotatorHash(state.project, a.id); });
    body.append(row);
  }
  for (const th of document.querySelectorAll("#annotators th.sortable")) {
    const label = th.textContent.replace(/ [▲▼]$/, "");
    th.textContent = th.dataset.key === key ? label + (state.sortDescending ? " ▼" : " ▲") : label;
  }
}

function openAnnotator(a, scroll) {
  state.annotator = a.id;
  for (const row of document.querySelectorAll("#annotators tbody tr")) {
    row.classList.toggle("selected", row.dataset.annotator === a.id);
  }
  const section = document.getElementById("annotator");
  section.style.display = "block";
  document.getElementById("annotator-title").textContent =
      "Annotator " + a.id + ": " + a.labels + " labels, estimated accuracy " + fixed(a.accuracy, 3) +
      (a.spam_score !== null ? ", spam score " + fixed(a.spam_score, 3) : "");
  const table = document.getElementById("confusion");
  table.replaceChildren();
  if (a.confusion === null) {
    table.append(el("caption", "Too many classes to show the confusion matrix.", "muted"));
    return;
  }
  const head = el("tr");
  head.append(el("th", "true \\ label", "text"));
  for (const c of state.classes) head.append(el("th", c));
  table.append(head);
  a.confusion.forEach((values, r) => {
    const row = el("tr");
    row.append(el("th", state.classes[r], "text"));
    values.forEach((p, c) => {
      const cell = el("td", fixed(p, 2), "cell");
      // Diagonal in blue, errors in red; opacity is the probability.
      const rgb = r === c ? "40, 90, 200" : "200, 40, 40";
      cell.style.background = "rgba(" + rgb + ", " + Math.max(0, Math.min(1, p)).toFixed(3) + ")";
      if (p > 0.55) cell.style.color = "#fff";
      row.append(cell);
    });
    table.append(row);
  });
  if (scroll) section.scrollIntoView();
}

for (const th of document.querySelectorAll("#annotators th.sortable")) {
  th.addEventListener("click", () => {
    if (state.sortKey === th.dataset.key) {
      state.sortDescending = !state.sortDescending;
    } else {
      state.sortKey = th.dataset.key;
      state.sortDescending = th.dataset.key !== "id";
    }
    renderAnnotators();
  });
}
show(true).catch(showError);
setInterval(() => { if (!state.paused) show(false).catch(showError); }, kRefreshMs);
</script>
</body>
</html>
)HTML";

}  // namespace verity::server
