// The status page of one instance: asks the server for /status.json every second and
// redraws the tables and charts from it. Every value is set as text (never as markup): a
// stream's name or an error message is the outside world's.
"use strict";

const REFRESH_MS = 1000;
const TIMEOUT_MS = 3000;
const SVG = "http://www.w3.org/2000/svg";

// Columns in the order a reader follows them; any other key of a row follows.
const STREAM_COLUMNS = ["stream", "name", "applied", "lines", "dropped", "por", "closed"];
const SINK_COLUMNS = ["sink", "linked", "committed", "pending_bytes", "txn", "commits",
                      "aborts", "aborts_in_a_row", "active"];
const REPLICA_COLUMNS = ["replica", "links_at", "receive_port", "send_port", "ic_port",
                         "log_lock"];
const RECENT_JOB_COLUMNS = ["job", "phase", "attempts", "reason"];
// Report keys with a place of their own, not shown again under "More counters".
const PLACED = new Set(["streams", "sinks", "jobs", "linked", "aborts_in_a_row", "stopped",
                        "run_started"]);
// Numbers that name something rather than count: written without grouping.
const NAMES = new Set(["port", "receive_port", "send_port", "ic_port", "replica", "version",
                       "pid"]);

let failingSince = null;

function $(id) {
  return document.getElementById(id);
}

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  if (cls) node.className = cls;
  return node;
}

function cell(value, column) {
  if (value === null || value === undefined) return "-";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value === "number") {
    return Number.isInteger(value) && !NAMES.has(column) ? value.toLocaleString("en-US") : String(value);
  }
  if (Array.isArray(value)) return value.map((v) => cell(v)).join(", ");
  if (typeof value === "object") return Object.entries(value).map(([k, v]) => `${k}: ${cell(v, k)}`).join(", ");
  return String(value);
}

function clock(seconds) {
  const d = new Date(seconds * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, "0")).join(":");
}

function age(seconds) {
  if (seconds < 120) return `${Math.round(seconds)} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

// rows: [[key, {column: value}]]; the table's columns are `known` that occur, then the rest.
function fillTable(table, known, rows) {
  table.replaceChildren();
  if (!rows.length) {
    const tr = el("tr");
    tr.append(el("td", "none", "quiet"));
    table.append(tr);
    return;
  }
  const columns = known.filter((c) => rows.some(([, r]) => c in r));
  for (const [, r] of rows) for (const c of Object.keys(r)) if (!columns.includes(c)) columns.push(c);
  const head = el("thead");
  const htr = el("tr");
  for (const c of columns) htr.append(el("th", c.replaceAll("_", " ")));
  head.append(htr);
  const body = el("tbody");
  for (const [key, r] of rows) {
    const tr = el("tr");
    tr.dataset.key = key;
    for (const c of columns) {
      const v = r[c];
      const td = el("td", cell(v, c), typeof v === "number" ? "num" : "");
      td.dataset.col = c;
      tr.append(td);
    }
    body.append(tr);
  }
  table.append(head, body);
}

function keyed(items, keyName) {
  return Object.entries(items || {}).map(([k, v]) =>
    [k, Object.assign({[keyName]: k}, v !== null && typeof v === "object" ? v : {value: v})]);
}

function showSummary(doc, report) {
  const dl = $("summary");
  dl.replaceChildren();
  const items = [];
  if (report) {
    // The live counters are of this run (since it became primary); the tables' are
    // the state's, of every run.
    const run = typeof report.run_started === "number" ? ` (this run, since ${clock(report.run_started)})` : "";
    if ("port" in report) items.push(["port", cell(report.port, "port")]);
    for (const k of ["connections", "received", "acked", "lag"]) {
      if (k in report) items.push([k + run, cell(report[k], k)]);
    }
    const lat = report.commit_latency;
    if (lat && typeof lat === "object") {
      items.push(["commits measured", cell(lat.commits)]);
      items.push(["commit latency (last / median / slowest)",
                  [lat.last_ms, lat.p50_ms, lat.max_ms].map((v) => v === null || v === undefined ? "-" : `${v} ms`).join(" / ")]);
    }
  }
  for (const [k, v] of items) {
    dl.append(el("dt", k), el("dd", v));
  }
}

function showJobs(jobs) {
  const section = $("jobs-section");
  section.hidden = !(jobs && typeof jobs === "object");
  if (section.hidden) return;
  const values = Object.values(jobs);
  if (values.length && values.every((v) => v !== null && typeof v === "object" && !Array.isArray(v))) {
    fillTable($("jobs"), ["job", "state", "attempt"], keyed(jobs, "job"));
    fillTable($("recent-jobs"), RECENT_JOB_COLUMNS, []);
    return;
  }
  const counters = {};
  for (const [k, v] of Object.entries(jobs)) if (v === null || typeof v !== "object") counters[k] = v;
  fillTable($("jobs"), ["decided", "waiting", "running", "done", "failed", "cancelled", "attempts"],
            [["counters", counters]]);
  const recent = Array.isArray(jobs.recent) ? jobs.recent : [];
  fillTable($("recent-jobs"), RECENT_JOB_COLUMNS, recent.filter(Array.isArray).map((e) =>
    [String(e[0]), Object.fromEntries(RECENT_JOB_COLUMNS.map((c, i) => [c, e[i]]))]));
}

function showSections(report) {
  const box = $("sections");
  box.replaceChildren();
  for (const [name, value] of Object.entries(report || {})) {
    if (PLACED.has(name) || value === null || typeof value !== "object" || Array.isArray(value)) continue;
    box.append(el("h3", name.replaceAll("_", " ")));
    const table = el("table");
    table.id = `section-${name}`;
    const flat = {};
    for (const [k, v] of Object.entries(value)) flat[k] = v;
    fillTable(table, [], [[name, flat]]);
    box.append(table);
  }
}

function showErrors(errors) {
  const list = $("errors");
  list.replaceChildren();
  if (!errors.length) {
    list.append(el("li", "none", "quiet"));
    return;
  }
  for (const e of errors.slice().reverse()) {  // newest first
    const li = el("li");
    const level = String(e.level || "-");
    li.append(el("span", typeof e.time === "number" ? clock(e.time) : "-", "time"), " ",
              el("span", level, `level ${level.toLowerCase()}`), " ",
              el("span", String(e.logger || "-"), "logger"), " ",
              el("span", String(e.message || ""), "message"));
    list.append(li);
  }
}

// ---------------------------------------------------------------- the charts

// Per-second rates of a counter between consecutive samples; null where a counter went
// back (a new life of the instance counts afresh) or is missing.
function rates(history, get) {
  const out = [];
  for (let i = 1; i < history.length; i++) {
    const a = history[i - 1], b = history[i];
    const va = get(a), vb = get(b), dt = b.time - a.time;
    out.push([b.time, typeof va === "number" && typeof vb === "number" && dt > 0 && vb >= va ? (vb - va) / dt : null]);
  }
  return out;
}

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function tickLabel(v) {
  if (v >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return v >= 10 || v === 0 ? String(Math.round(v)) : v.toFixed(1);
}

// series: [{cls, points: [[time, value or null]], dots}]; drawn on a shared time axis.
function drawChart(svg, series, t0, t1) {
  svg.replaceChildren();
  const W = 640, H = 180, left = 48, right = 8, top = 8, bottom = 22;
  const values = series.flatMap((s) => s.points.map((p) => p[1]).filter((v) => v !== null));
  const span = Math.max(t1 - t0, 1);
  const ymax = Math.max(...values, 0) * 1.1 || 1;
  const x = (t) => left + (W - left - right) * (t - t0) / span;
  const y = (v) => top + (H - top - bottom) * (1 - v / ymax);
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    svg.append(svgEl("line", {x1: left, x2: W - right, y1: y(v), y2: y(v), class: "grid"}));
    svg.append(svgEl("text", {x: left - 4, y: y(v) + 4, class: "axis", "text-anchor": "end"}, tickLabel(v)));
  }
  svg.append(svgEl("text", {x: left, y: H - 6, class: "axis"}, clock(t0)));
  svg.append(svgEl("text", {x: W - right, y: H - 6, class: "axis", "text-anchor": "end"}, clock(t1)));
  let plotted = 0;
  for (const s of series) {
    let run = [];
    const flush = () => {
      if (run.length) {
        svg.append(svgEl("polyline", {points: run.join(" "), class: `line ${s.cls}`}));
      }
      run = [];
    };
    for (const [t, v] of s.points) {
      if (v === null) { flush(); continue; }
      const p = `${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      run.push(p);
      plotted++;
      if (s.dots) svg.append(svgEl("circle", {cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.5, class: `dot ${s.cls}`}));
    }
    flush();
  }
  svg.dataset.points = String(plotted);
  if (!plotted) {
    svg.append(svgEl("text", {x: W / 2, y: H / 2, class: "axis", "text-anchor": "middle"},
                     "no samples yet"));
  }
}

function showCharts(history) {
  const h = history.filter((s) => s && typeof s.time === "number");
  const t1 = h.length ? h[h.length - 1].time : Date.now() / 1000;
  const t0 = h.length ? h[0].time : t1 - 60;
  drawChart($("throughput"), [
    {cls: "received", points: rates(h, (s) => s.received)},
    {cls: "applied", points: rates(h, (s) => s.applied)},
  ], t0, t1);
  const latency = (key) => h.map((s) => [s.time, typeof s[key] === "number" ? s[key] : null]);
  drawChart($("latency"), [
    {cls: "max", points: latency("latency_max_ms"), dots: true},
    {cls: "mean", points: latency("latency_ms"), dots: true},
  ], t0, t1);
}

// ---------------------------------------------------------------- one refresh

function show(doc) {
  document.title = `${doc.name}: ambrosia status`;
  $("name").textContent = doc.name;
  const report = doc.report;
  const banner = $("banner");
  if (doc.error) {
    banner.textContent = doc.error;
    banner.className = "banner error";
    banner.hidden = false;
  } else if (doc.running === false) {
    const how = {crashed: "crashed (its process ended without writing its last status)",
                 stopping: "stopping"}[doc.state] || "stopped";
    banner.textContent = `${how}: last status of ${age(doc.age_seconds)} ago`;
    banner.className = "banner stopped";
    banner.hidden = false;
  } else {
    banner.hidden = true;
  }
  $("state").textContent = doc.running ? (report ? `running, status of ${age(doc.age_seconds)} ago` : "running")
                                       : (doc.state || "stopped");
  $("refreshed").textContent = `refreshed ${clock(doc.time)}, every ${REFRESH_MS / 1000} s`;
  showSummary(doc, report);
  const r = report || {};
  fillTable($("streams"), STREAM_COLUMNS, keyed(r.streams, "stream"));
  const sinks = keyed(r.sinks, "sink");
  for (const [name, row] of sinks) {
    if (r.linked && name in r.linked) row.linked = r.linked[name];
    if (r.aborts_in_a_row && name in r.aborts_in_a_row) row.aborts_in_a_row = r.aborts_in_a_row[name];
  }
  fillTable($("sinks"), SINK_COLUMNS, sinks);
  showJobs(r.jobs);
  const inst = doc.instance;
  $("role").textContent = doc.replicas_error ? doc.replicas_error :
    inst ? `${inst.role}, version ${inst.version}` : "";
  fillTable($("replicas"), REPLICA_COLUMNS, (doc.replicas || []).map((row) => [String(row.replica), row]));
  showErrors(Array.isArray(doc.errors) ? doc.errors : []);
  showCharts(Array.isArray(doc.history) ? doc.history : []);
  showSections(report);
}

function setOffline(error) {
  const box = $("offline");
  if (error === null) {
    failingSince = null;
    box.hidden = true;
    return;
  }
  failingSince = failingSince || Date.now() / 1000;
  box.textContent = `the status server does not answer (since ${clock(failingSince)}: ${error.message || error}); ` +
                    "showing what it sent last, and trying again";
  box.hidden = false;
}

async function refresh() {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  let doc = null;
  try {
    const reply = await fetch("status.json", {cache: "no-store", signal: ctl.signal});
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    doc = await reply.json();
    setOffline(null);
  } catch (err) {
    setOffline(err);
  } finally {
    clearTimeout(timer);
    setTimeout(refresh, REFRESH_MS);
  }
  if (doc !== null) {
    try {
      show(doc);
    } catch (err) {  // a report this page does not understand: said, not hidden
      const banner = $("banner");
      banner.textContent = `this page cannot show the status it got: ${err.message || err}`;
      banner.className = "banner error";
      banner.hidden = false;
    }
  }
}

refresh();
