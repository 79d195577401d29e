// marinbuild serve: the pages. Each page fetches its /api/ JSON and builds the DOM with textContent and
// attributes only: no user string (step names, configs, tracebacks) is ever parsed as HTML.
"use strict";

const STATES = ["built", "stale", "missing", "running", "waiting", "failed", "dep_failed", "damaged", "abandoned"];
const EVENT_STATE = { started: "running", waiting: "waiting", succeeded: "built", failed: "failed",
                      dep_failed: "dep_failed" };
const MAX_SHOWN = 1 << 20; // the file view's limit (marinbuild/serve/files.py)

function el(tag, attrs, ...children) {
  const node = tag === "svg" || SVG_TAGS.has(tag) ? document.createElementNS("http://www.w3.org/2000/svg", tag)
    : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(key, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.appendChild(typeof child === "string" || typeof child === "number"
      ? document.createTextNode(String(child)) : child);
  }
  return node;
}
const SVG_TAGS = new Set(["g", "rect", "text", "path", "title"]);

const main = () => document.getElementById("main");

function pathUrl(base, relative) { // /step/<relative>, each component percent-encoded
  return base + relative.split("/").map(encodeURIComponent).join("/");
}

async function getJson(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) {
    throw new Error((data && data.error) || `${response.status} ${response.statusText}`);
  }
  return data;
}

function showError(error) {
  main().replaceChildren(el("h1", {}, "Cannot show this page"), el("p", { class: "error", id: "error" },
    String(error.message || error)));
}

function badge(state) { return el("span", { class: `badge state-${state}`, "data-state": state }, state); }

function seconds(s) {
  if (s === null || s === undefined) return "";
  if (s < 1) return `${(s * 1000).toFixed(0)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function when(t) { return t ? new Date(t * 1000).toLocaleString() : ""; }

function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

// Live updates: one EventSource for the page; handlers get each event record.
function live(onRecord) {
  const indicator = document.getElementById("live");
  const source = new EventSource("/api/events");
  source.onopen = () => { indicator.textContent = "live"; indicator.dataset.state = "open"; };
  source.onerror = () => { indicator.textContent = "live: reconnecting"; indicator.dataset.state = "error"; };
  source.onmessage = (message) => {
    let record;
    try { record = JSON.parse(message.data); } catch (e) { return; }
    onRecord(record);
  };
  return source;
}

// -- graph ----------------------------------------------------------------------------------------

async function graphPage() {
  const data = await getJson("/api/graph");
  const root = main();
  const byId = new Map();
  const stateSelect = el("select", { id: "state-filter" }, el("option", { value: "" }, "every state"),
    ...STATES.map((s) => el("option", { value: s }, s)));
  const nameInput = el("input", { id: "name-filter", type: "search", placeholder: "filter by name or label" });
  const counts = el("span", { class: "counts", id: "counts" });
  root.replaceChildren(
    el("h1", {}, `${data.patterns.join(" ")} `, el("span", { class: "muted" }, `prefix ${data.prefix}`)),
    el("div", { class: "controls" }, stateSelect, nameInput, counts));
  if (!data.nodes.length) {
    root.appendChild(el("p", { class: "muted" }, "No steps match this pattern."));
    return;
  }
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 60, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const node of data.nodes) {
    // the second line is "label · state · duration"
    const width = Math.max(150, 7.2 * Math.max(node.name.length, (node.label || "").length + 20) + 24);
    g.setNode(node.id, { width, height: 44 });
  }
  for (const [from, to] of data.edges) g.setEdge(from, to);
  dagre.layout(g);
  const size = g.graph();
  const svg = el("svg", { class: "graph", id: "graph", width: size.width, height: size.height,
                          viewBox: `0 0 ${size.width} ${size.height}` });
  for (const e of g.edges()) {
    const points = g.edge(e).points;
    const d = points.map((p, i) => `${i ? "L" : "M"}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(" ");
    svg.appendChild(el("path", { class: "edge", d }));
  }
  for (const node of data.nodes) {
    const box = g.node(node.id);
    const sub = el("text", { class: "sub", x: 10, y: 34 });
    const group = el("g", { class: `node state-${node.state}`, "data-id": node.id, "data-name": node.name,
                            transform: `translate(${box.x - box.width / 2},${box.y - box.height / 2})` },
      el("title", {}, ""),
      el("rect", { width: box.width, height: box.height }),
      el("text", { x: 10, y: 17 }, node.name), sub);
    const entry = { node, group, sub };
    byId.set(node.id, entry);
    setNodeState(entry, node.state);
    group.addEventListener("click", () => { window.location.href = pathUrl("/step/", node.relative); });
    svg.appendChild(group);
  }
  root.appendChild(svg);
  const applyFilters = () => {
    const state = stateSelect.value;
    const text = nameInput.value.trim().toLowerCase();
    for (const { node, group } of byId.values()) {
      const shown = (!state || group.dataset.state === state)
        && (!text || node.name.toLowerCase().includes(text) || (node.label || "").toLowerCase().includes(text));
      group.classList.toggle("dim", !shown);
    }
  };
  const updateCounts = () => {
    const n = {};
    for (const { group } of byId.values()) n[group.dataset.state] = (n[group.dataset.state] || 0) + 1;
    counts.replaceChildren(...Object.keys(n).sort().map((s) => el("span", {}, badge(s), ` ${n[s]}`)));
  };
  stateSelect.addEventListener("change", applyFilters);
  nameInput.addEventListener("input", applyFilters);
  updateCounts();
  const refresh = async () => {
    const fresh = await getJson("/api/graph");
    for (const node of fresh.nodes) {
      const entry = byId.get(node.id);
      if (entry) { entry.node = node; setNodeState(entry, node.state); }
    }
    updateCounts();
    applyFilters();
  };
  live((record) => {
    if (record.kind === "build_finished") { refresh(); return; }
    const entry = byId.get(record.output_path);
    const state = EVENT_STATE[record.kind];
    if (entry && state) {
      if (record.kind === "started") entry.startedAt = record.time;
      else if ((record.kind === "succeeded" || record.kind === "failed") && entry.startedAt) {
        entry.node.duration = record.time - entry.startedAt;
      }
      setNodeState(entry, state);
      updateCounts();
      applyFilters();
    }
  });
}

function setNodeState(entry, state) {
  const { node, group, sub } = entry;
  for (const s of STATES) group.classList.remove(`state-${s}`);
  group.classList.add(`state-${state}`);
  group.dataset.state = state;
  node.state = state;
  const parts = [node.label || "", state];
  if (state === "running" && node.holder) parts.push(node.holder);
  else if (node.duration !== null && node.duration !== undefined) parts.push(seconds(node.duration));
  sub.textContent = parts.filter(Boolean).join(" · ");
  group.querySelector("title").textContent = `${node.name}\n${node.id}\n${state}${node.detail ? "\n" + node.detail : ""}`;
}

// -- step -----------------------------------------------------------------------------------------

function configTree(value, versioned, path) {
  if (value === null || typeof value !== "object" || Object.keys(value).length === 0) {
    return el("span", { class: "value" }, JSON.stringify(value));
  }
  const list = el("ul", { class: "config" });
  const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
  for (const [key, child] of entries) {
    const dotted = path ? `${path}.${key}` : key;
    const isVersioned = versioned.some((v) => v === dotted || v.startsWith(dotted + ".") || dotted.startsWith(v + "."));
    const item = el("li", { class: isVersioned ? "versioned" : "", "data-path": dotted },
      el("span", { class: "key" }, key), ": ");
    item.appendChild(configTree(child, versioned, dotted));
    list.appendChild(item);
  }
  return list;
}

function facts(rows) {
  return el("table", { class: "facts" }, ...rows.filter(([, v]) => v !== null && v !== undefined && v !== "")
    .map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v))));
}

async function stepPage() {
  const relative = decodeURIComponent(window.location.pathname.slice("/step/".length));
  const render = async () => {
    const s = await getJson(pathUrl("/api/step/", relative));
    document.title = `${s.name} · marinbuild`;
    const root = main();
    const items = [el("h1", { id: "step-name" }, s.name, " ", badge(s.state))];
    items.push(facts([
      ["target", s.label], ["rule", s.rule], ["state", s.state], ["status", s.status],
      ["output", s.output_path], ["hash", s.hash], ["function", s.fn_name], ["size", bytes(s.size)],
      ["in the graph", s.in_graph ? null : "no: not a step of the served pattern"],
    ]));
    if (s.lease) {
      items.push(el("h2", {}, "Lease"), facts([["holder", s.lease.holder], ["last heartbeat", `${seconds(s.lease.age)} ago`],
        ["live", s.lease.live ? "yes" : "no (stale)"]]));
    }
    if (s.why !== null) items.push(el("h2", {}, "Why (marinbuild why)"), el("pre", { id: "why" }, s.why));
    for (const log of s.logs || []) {
      items.push(el("h2", {}, "Log ", el("a", { href: pathUrl("/file/", log.path) }, log.name),
        log.cut ? el("span", { class: "muted" }, " (its end)") : null), el("pre", { class: "log" }, log.tail));
    }
    if (s.traceback) {
      items.push(el("h2", {}, "Traceback"), el("pre", { id: "traceback", class: "error" }, s.traceback));
    }
    for (const e of s.errors || []) items.push(el("p", { class: "error" }, e));
    if (s.config !== null && s.config !== undefined) {
      items.push(el("h2", {}, "Config"), el("p", { class: "muted" },
        "Fields marked versioned are part of the step's version: changing one changes the output path."));
      const attrsVersioned = s.versioned;
      items.push(el("div", { id: "config" }, configTree(s.config, attrsVersioned, "")));
    }
    if (s.dependencies.length) {
      items.push(el("h2", {}, "Dependencies"), el("ul", {}, ...s.dependencies.map((d) => el("li", {},
        d.startsWith(prefixOf(s)) ? el("a", { href: pathUrl("/step/", d.slice(prefixOf(s).length + 1)) }, d) : d))));
    }
    items.push(el("h2", {}, "Files"));
    if (!s.files.length) items.push(el("p", { class: "muted" }, "No output folder."));
    else {
      items.push(el("table", { id: "files" }, ...s.files.map((f) => el("tr", {},
        el("td", {}, f.size <= MAX_SHOWN ? el("a", { href: pathUrl("/file/", f.path) }, f.name) : f.name),
        el("td", { class: "muted" }, bytes(f.size))))));
    }
    if (s.artifact !== null && s.artifact !== undefined) {
      items.push(el("h2", {}, "Artifact"), el("pre", {}, JSON.stringify(s.artifact, null, 2)));
    }
    items.push(el("h2", {}, "Version"), el("pre", {}, JSON.stringify(s.version, null, 2)));
    if (s.code) items.push(el("h2", {}, "Code it was built with"), el("pre", { id: "code" }, JSON.stringify(s.code, null, 2)));
    root.replaceChildren(...items);
    return s;
  };
  const s = await render();
  live((record) => {
    if (record.output_path === s.output_path || record.kind === "build_finished") render().catch(showError);
  });
}

function prefixOf(step) { return step.output_path.slice(0, step.output_path.length - step.relative.length - 1); }

// -- runs -----------------------------------------------------------------------------------------

async function runsPage() {
  const data = await getJson("/api/runs");
  const root = main();
  const items = [el("h1", {}, "Runs ", el("span", { class: "muted" }, `prefix ${data.prefix}`)),
    el("h2", {}, "Builds (this workspace's event logs)")];
  if (!data.builds.length) items.push(el("p", { class: "muted" }, "No build recorded yet."));
  else {
    items.push(el("table", { id: "builds" }, el("tr", {}, ...["when", "asked", "ran", "failed", ""].map((h) => el("th", {}, h))),
      ...data.builds.map((b) => el("tr", { "data-id": b.id },
        el("td", {}, el("a", { href: `/run/${encodeURIComponent(b.id)}` }, when(b.time))),
        el("td", {}, b.patterns.join(" ")), el("td", {}, String(b.ran.length)),
        el("td", {}, b.failed.length ? b.failed.join(", ") : ""),
        el("td", {}, b.refused ? `refused: ${b.refused}` : b.finished ? "" : "running (or stopped)")))));
  }
  items.push(el("h2", {}, "Run info files (experiments/)"));
  if (!data.run_infos.length) items.push(el("p", { class: "muted" }, "None."));
  else {
    items.push(el("table", { id: "run-infos" }, ...data.run_infos.map((r) => el("tr", {},
      el("td", {}, el("a", { href: `/experiment?path=${encodeURIComponent(r.path)}` }, r.name)),
      el("td", {}, r.created || ""), el("td", { class: "muted" }, `${r.steps} steps`), el("td", { class: "muted" }, r.script || "")))));
  }
  root.replaceChildren(...items);
}

async function runPage() {
  const id = decodeURIComponent(window.location.pathname.slice("/run/".length));
  const render = async () => {
    const run = await getJson(`/api/run/${encodeURIComponent(id)}`);
    const times = run.steps.flatMap((s) => [s.start, s.end]).filter((t) => t);
    const t0 = Math.min(run.time, ...times);
    const t1 = Math.max(run.end_time || 0, ...times, t0 + 0.001);
    const span = t1 - t0;
    const rows = run.steps.map((s) => {
      const state = s.outcome === "succeeded" ? "built" : s.outcome || "running";
      const bar = el("div", { class: `bar state-${state}` });
      const start = s.start || s.end || t0;
      const end = s.end || t1;
      bar.style.left = `${(100 * (start - t0)) / span}%`;
      bar.style.width = `${(100 * (end - start)) / span}%`;
      return el("tr", { "data-step": s.step },
        el("td", {}, el("a", { href: pathUrl("/step/", s.relative) }, s.step)),
        el("td", {}, el("div", { class: "timeline" }, bar)), el("td", {}, badge(state)),
        el("td", { class: "muted nowrap" }, s.start && s.end ? seconds(s.end - s.start) : ""),
        el("td", { class: "error" }, s.error || ""));
    });
    main().replaceChildren(el("h1", {}, `Build ${run.id}`),
      facts([["asked", run.patterns.join(" ")], ["command", `marinbuild ${run.argv.join(" ")}`], ["started", when(run.time)],
        ["finished", run.refused ? `refused, nothing ran: ${run.refused}`
          : run.finished ? when(run.end_time) : "not yet (or the build was stopped)"],
        ["took", run.finished ? seconds(run.end_time - run.time) : ""], ["compute", run.compute ? run.compute.text : ""],
        ["prefix", run.prefix]]),
      el("h2", {}, "Timeline"),
      rows.length ? el("table", { id: "timeline" }, ...rows) : el("p", { class: "muted" }, "Nothing ran."));
  };
  await render();
  live((record) => { if (record.run === id) render().catch(showError); });
}

async function experimentPage() {
  const path = new URLSearchParams(window.location.search).get("path") || "";
  const data = await getJson(`/api/experiment?path=${encodeURIComponent(path)}`);
  main().replaceChildren(el("h1", {}, data.path.split("/").pop()),
    facts([["created", data.created_date], ["script", data.caller_path], ["user", data.user], ["runner", data.worker_id],
      ["git commit", data.git_commit], ["prefix", data.prefix], ["file", data.path]]),
    el("h2", {}, "Steps"),
    el("table", { id: "steps" }, ...data.steps.map((s) => el("tr", {},
      el("td", {}, s.relative ? el("a", { href: pathUrl("/step/", s.relative) }, s.name || s.relative) : s.name),
      el("td", {}, badge(s.state)), el("td", { class: "muted" }, s.output_path || "")))));
}

// -- training curves ------------------------------------------------------------------------------

const PALETTE = ["#1565c0", "#c62828", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#5d4037", "#ad1457"];

function alignedSeries(runs, key) {
  const xs = [...new Set(runs.flatMap((r) => r[key].map((p) => p[0])))].sort((a, b) => a - b);
  const columns = runs.map((r) => {
    const at = new Map(r[key].map((p) => [p[0], p[1]]));
    return xs.map((x) => (at.has(x) ? at.get(x) : null));
  });
  return [xs, ...columns];
}

function chart(title, runs, key, id) {
  const box = el("div", { class: "chart", id });
  const data = alignedSeries(runs, key);
  const width = Math.min(900, Math.max(400, main().clientWidth - 40));
  const options = {
    title, width, height: 320,
    scales: { x: { time: false } },
    axes: [{ label: "step" }, { label: "loss" }],
    series: [{ label: "step" }, ...runs.map((r, i) => ({
      label: r.settings_line ? `${r.name} (${r.settings_line})` : r.name, stroke: PALETTE[i % PALETTE.length], width: 2, spanGaps: true,
    }))],
  };
  // uPlot draws on a canvas and writes its legend with textContent.
  new uPlot(options, data, box);
  return box;
}

async function trainingPage() {
  const chosen = new URLSearchParams(window.location.search).getAll("path");
  const query = chosen.map((p) => `path=${encodeURIComponent(p)}`).join("&");
  const data = await getJson(`/api/training${query ? "?" + query : ""}`);
  const root = main();
  const items = [el("h1", {}, "Training curves ", el("span", { class: "muted" }, `${data.runs.length} run(s)`))];
  if (!data.runs.length) {
    items.push(el("p", { class: "muted" }, "No built step of this graph has training losses (metrics.jsonl)."));
    root.replaceChildren(...items);
    return;
  }
  const legend = el("ul", { class: "legend", id: "legend" }, ...data.runs.map((r, i) => {
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = PALETTE[i % PALETTE.length];
    return el("li", { "data-output": r.output_path }, swatch,
      el("a", { href: pathUrl("/step/", r.relative) }, r.name), " ", el("span", { class: "muted" }, r.settings_line));
  }));
  items.push(legend);
  root.replaceChildren(...items);
  root.appendChild(chart("training loss", data.runs, "train_loss", "train-chart"));
  const withEval = data.runs.filter((r) => r.validation_loss.length);
  if (withEval.length) root.appendChild(chart("validation loss", data.runs, "validation_loss", "eval-chart"));
}

// -- dispatch -------------------------------------------------------------------------------------

const PAGES = { graph: graphPage, step: stepPage, runs: runsPage, run: runPage, experiment: experimentPage,
                training: trainingPage };

document.addEventListener("DOMContentLoaded", () => {
  const page = PAGES[document.body.dataset.page];
  if (page) page().then(() => { document.body.dataset.ready = "1"; }).catch(showError);
});
