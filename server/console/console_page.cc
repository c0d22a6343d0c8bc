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
</style>
</head>
<body>
<h1>Verity console</h1>
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
  <h2>Posterior confidence</h2>
  <div id="histogram"></div>
  <div id="histogram-axis"></div>
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
      <th class="sortable" data-key="accuracy">Estimated accuracy</th></tr></thead>
    <tbody></tbody>
  </table>
</section>
<section id="annotator">
  <h2 id="annotator-title"></h2>
  <div class="muted">Rows: true class; columns: the label given. P(label | true class).</div>
  <table id="confusion"></table>
</section>
<script>
"use strict";
const state = { project: null, annotators: [], sortKey: "labels", sortDescending: true };

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
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
  loadProjects().catch(showError);
});
function showError(e) { document.getElementById("error").textContent = String(e.message || e); }

async function loadProjects() {
  const data = await getJson("/api/projects");
  const body = document.querySelector("#projects tbody");
  body.replaceChildren();
  for (const p of data.projects) {
    const row = el("tr", null, "clickable");
    row.dataset.project = p.name;
    if (p.name === state.project) row.classList.add("selected");
    row.append(el("td", p.name, "text"), el("td", p.classes.join(", "), "text"),
               el("td", p.items), el("td", p.annotators), el("td", p.labels),
               el("td", fixed(p.labels_per_second, 2)),
               el("td", p.model_version > 0 ? p.model_method + " v" + p.model_version
                                            : "majority vote (no fit yet)", "text"));
    row.addEventListener("click", () => openProject(p.name).catch(showError));
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
  for (const row of document.querySelectorAll("#projects tbody tr")) {
    row.classList.toggle("selected", row.dataset.project === name);
  }
  const path = "/api/projects/" + encodeURIComponent(name);
  const [project, annotators] = await Promise.all([getJson(path), getJson(path + "/annotators")]);
  document.getElementById("project").style.display = "block";
  document.getElementById("annotator").style.display = "none";
  document.getElementById("project-title").textContent = "Project " + project.name;
  document.getElementById("project-summary").textContent =
      project.items + " items, " + project.annotators + " annotators, " + project.labels +
      " labels (" + project.labels_since_version + " since the model version); method " +
      project.method + ", serving " +
      (project.model_version > 0 ? project.model_method + " v" + project.model_version
                                 : "majority vote") + (project.training ? " (training)" : "") +
      (project.chosen_method ? "; auto chose " + project.chosen_method + ": " +
                                   project.choice_reason : "");
  renderHistogram(project.confidence_histogram);
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
  renderAnnotators();
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
  const rows = state.annotators.slice().sort((x, y) =>
      sign * (x[key] < y[key] ? -1 : x[key] > y[key] ? 1 : 0));
  const body = document.querySelector("#annotators tbody");
  body.replaceChildren();
  for (const a of rows) {
    const row = el("tr", null, "clickable");
    row.dataset.annotator = a.id;
    row.append(el("td", a.id, "text"), el("td", a.labels), el("td", fixed(a.accuracy, 3)));
    row.addEventListener("click", () => openAnnotator(a));
    body.append(row);
  }
  for (const th of document.querySelectorAll("#annotators th.sortable")) {
    const label = th.textContent.replace(/ [▲▼]$/, "");
    th.textContent = th.dataset.key === key ? label + (state.sortDescending ? " ▼" : " ▲") : label;
  }
}

function openAnnotator(a) {
  for (const row of document.querySelectorAll("#annotators tbody tr")) {
    row.classList.toggle("selected", row.dataset.annotator === a.id);
  }
  const section = document.getElementById("annotator");
  section.style.display = "block";
  document.getElementById("annotator-title").textContent =
      "Annotator " + a.id + ": " + a.labels + " labels, estimated accuracy " + fixed(a.accuracy, 3);
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
  section.scrollIntoView();
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
loadProjects().catch(showError);
setInterval(() => loadProjects().catch(showError), 10000);
</script>
</body>
</html>
)HTML";

}  // namespace verity::server
