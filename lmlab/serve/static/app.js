// The playground page: every view calls the JSON API and draws what comes back.
"use strict";

const $ = (selector, root = document) => root.querySelector(selector);
let runs = [];

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

function showError(message) {
  const box = $("#error");
  box.textContent = message || "";
  box.hidden = !message;
}

async function api(path, body) {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  if (!response.ok) {
    const answer = await response.json().catch(() => ({ error: response.statusText }));
    throw new Error(answer.error);
  }
  return response;
}

const post = async (path, body) => (await api(path, body)).json();

// The chosen runs: the first, and the one beside it if any.
function chosenRuns() {
  const names = [$("#run-a").value, $("#run-b").value].filter(Boolean);
  return names.map((name) => runs.find((run) => run.name === name));
}

// One pane per chosen run in a section; `draw(run, pane)` fills each, errors go to #error.
async function eachRun(section, draw) {
  showError("");
  const panes = $(".panes", section);
  panes.replaceChildren();
  await Promise.all(chosenRuns().map(async (run) => {
    const pane = el("div", { class: "pane", "data-run": run.name }, el("h3", {}, run.name));
    panes.append(pane);
    try {
      await draw(run, pane);
    } catch (error) {
      showError(`${run.name}: ${error.message}`);
    }
  }));
}

function formValues(form) {
  const values = {};
  for (const input of form.elements) {
    if (!input.name || (input.value === "" && input.type !== "checkbox")) continue;
    if (input.type === "checkbox") values[input.name] = input.checked;
    else values[input.name] = input.type === "number" ? Number(input.value) : input.value;
  }
  return values;
}

function onSubmit(id, draw) {
  const section = $(`#${id}`);
  $("form", section).addEventListener("submit", (event) => {
    event.preventDefault();
    eachRun(section, (run, pane) => draw(run, pane, formValues(event.target)));
  });
}

function bar(label, probability) {
  return el("div", { class: "bar" }, el("span", { class: "label" }, label),
    el("span", { class: "fill", style: `width:${(100 * probability).toFixed(1)}%` }),
    el("span", { class: "p" }, probability.toFixed(3)));
}

onSubmit("fill-mask", async (run, pane, values) => {
  const answer = await post("/api/fill-mask", { run: run.name, ...values });
  answer.masks.forEach((candidates, index) => {
    const group = el("div", { class: "mask" }, el("h4", {}, `mask ${index + 1}`));
    for (const c of candidates) group.append(bar(c.token, c.probability));
    pane.append(group);
  });
});

// Generation streams server-sent events over a POST, so it reads the body itself.
let stopping = new AbortController();
$("#generate .stop").addEventListener("click", () => stopping.abort());

onSubmit("generate", async (run, pane, values) => {
  if (values.stop !== undefined) values.stop = [values.stop];
  const output = el("div", { class: "output" }, el("b", {}, values.prompt));
  pane.append(output);
  stopping = new AbortController();
  const response = await fetch("/api/generate", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ run: run.name, ...values }), signal: stopping.signal,
  });
  if (!response.ok) throw new Error((await response.json()).error);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      const events = buffer.split("\n\n");
      buffer = events.pop();
      for (const event of events) showToken(output, event);
    }
  } catch (error) {
    if (error.name !== "AbortError") throw error;
  }
  pane.dataset.done = "true";
});

function showToken(output, event) {
  const [kind, data] = event.split("\n").map((line) => line.slice(line.indexOf(": ") + 2));
  if (kind !== "token") return;
  const piece = JSON.parse(data);
  const hover = piece.tokens.map((t) => `${JSON.stringify(t.token)} ${t.probability.toFixed(3)}` +
    "\n  " + t.alternatives.map((a) => `${JSON.stringify(a.token)} ${a.probability.toFixed(3)}`)
      .join("\n  ")).join("\n");
  output.append(el("span", { class: "piece", title: hover }, piece.text));
}

onSubmit("attention", async (run, pane, values) => {
  const request = { run: run.name, text: values.text, prefix_len: values.prefix_len };
  if (values.all) request.kinds = ["bidirectional", "causal", "prefix", "span-corruption"];
  const answer = await post("/api/attention", request);
  for (const grid of answer.grids) pane.append(attentionGrid(answer, grid));
});

// A span-corruption grid brings its own row (sentinels in place) and split.
function attentionGrid(answer, grid) {
  const tokens = grid.tokens || answer.tokens;
  const split = grid.prefix_len || answer.prefix_len;
  const splits = grid.kind === "prefix" || grid.kind === "span-corruption";
  const title = splits ? `${grid.kind} (split after ${split})` : grid.kind;
  const table = el("table", { class: "grid", "data-kind": grid.kind });
  table.append(el("caption", {}, title),
    el("thead", {}, el("tr", {}, el("th"), ...tokens.map((t) => el("th", {}, t)))));
  const body = el("tbody");
  grid.allowed.forEach((row, query) => {
    body.append(el("tr", {}, el("th", {}, tokens[query]), ...row.map((allowed, key) => {
      const prefix = splits && key < split ? " prefix" : "";
      return el("td", { class: (allowed ? "on" : "off") + prefix,
        title: `${tokens[query]} → ${tokens[key]}` });
    })));
  });
  table.append(body);
  return table;
}

const lines = (text) => text.split("\n").filter((line) => line.trim());

onSubmit("embed", async (run, pane, values) => {
  const answer = await post("/api/embed", { run: run.name, texts: lines(values.texts) });
  const table = el("table", { class: "sim" });
  answer.similarity.forEach((row, i) => table.append(el("tr", {},
    el("th", {}, answer.texts[i]), ...row.map((s) => el("td", {}, s.toFixed(3))))));
  pane.append(table);
});

onSubmit("predict", async (run, pane, values) => {
  const answer = await post("/api/predict", { run: run.name, texts: lines(values.texts) });
  answer.predictions.forEach((prediction, i) => {
    pane.append(el("h4", {}, answer.texts[i]), predictionView(answer.texts[i], prediction, run));
  });
});

// A text with character spans highlighted, each titled with its label.
function highlighted(text, spans) {
  const out = el("p");
  let at = 0;
  for (const span of spans) {
    out.append(text.slice(at, span.start), el("mark", { title: span.label }, text.slice(span.start, span.end)));
    at = span.end;
  }
  out.append(text.slice(at));
  return out;
}

function predictionView(text, prediction, run) {
  if (prediction.scores) {
    const box = el("div");
    for (const [label, p] of Object.entries(prediction.scores)) box.append(bar(label, p));
    return box;
  }
  if (prediction.entities) {
    return highlighted(text, prediction.entities.map((e) => ({ ...e, label: e.entity_group })));
  }
  if (prediction.answer !== undefined) {
    const context = text.split(run.separator).slice(1).join(run.separator);
    return highlighted(context, [{ start: prediction.start, end: prediction.end,
      label: prediction.score.toFixed(3) }]);
  }
  return el("p", {}, `score ${prediction.score.toFixed(3)}`);
}

// Curves poll each run's metrics.jsonl, so a run still training draws as it goes. The server
// names each line and gives the points of the rows it read; they add to those held.
const curves = {};

async function pollCurves() {
  for (const run of runs.filter((r) => r.can.metrics)) {
    const seen = curves[run.name] || (curves[run.name] = { lines: {}, next: 0 });
    try {
      const answer = await (await api(`/api/metrics?run=${encodeURIComponent(run.name)}&after=${seen.next}`)).json();
      for (const line of answer.curves) {
        const held = seen.lines[line.name] || (seen.lines[line.name] = { ...line, points: [] });
        held.points.push(...line.points);
      }
      seen.next = answer.next;
    } catch (error) {
      showError(`${run.name}: ${error.message}`);
    }
  }
  drawCurves();
}

function drawCurves() {
  const panes = $("#curves .panes");
  for (const run of chosenRuns().filter((r) => r.can.metrics)) {
    const lines = curves[run.name] ? Object.values(curves[run.name].lines) : [];
    let canvas = $(`canvas[data-run="${run.name}"]`, panes);
    if (!canvas) {
      canvas = el("canvas", { width: 420, height: 220, "data-run": run.name });
      panes.append(el("div", { class: "pane" }, el("h3", {}, run.name), canvas));
    }
    plot(canvas, lines.map((line, i) => ({ ...line, color: COLORS[i % COLORS.length] })));
  }
}

const COLORS = ["#4a7bd0", "#c33", "#2b8a3e", "#8a5a00"];

// Lines on one canvas, framed, with the first and last step below and each scale's ends
// beside it: the shared one on the left, each series marked `own` (its own scale) on the
// right, one below the other in its colour. The first series is drawn last, on top: a lone
// validation point at its scale's end is not hidden under the learning rate's.
function plot(canvas, series) {
  const g = canvas.getContext("2d");
  const pad = 44;
  const [width, height] = [canvas.width - 2 * pad, canvas.height - 2 * pad];
  g.clearRect(0, 0, canvas.width, canvas.height);
  const all = series.flatMap((s) => s.points);
  if (!all.length) return;
  const steps = all.map((p) => p[0]);
  const [x0, x1] = [Math.min(...steps), Math.max(...steps, Math.min(...steps) + 1)];
  const range = (points) => {
    const ys = points.map((p) => p[1]);
    return [Math.min(...ys), Math.max(...ys, Math.min(...ys) + 1e-9)];
  };
  const sharedPoints = series.filter((s) => !s.own).flatMap((s) => s.points);
  const shared = range(sharedPoints.length ? sharedPoints : all);
  const number = (v) => (Math.abs(v) >= 0.01 || v === 0 ? v.toFixed(2) : v.toExponential(1));
  g.strokeStyle = "#ccc";
  g.strokeRect(pad, pad, width, height);
  g.fillStyle = "#555";
  g.fillText(`step ${x0}`, pad, pad + height + 14);
  g.fillText(`${x1}`, pad + width - g.measureText(`${x1}`).width, pad + height + 14);
  g.fillText(number(shared[1]), 2, pad + 4);
  g.fillText(number(shared[0]), 2, pad + height);
  let owned = 0;
  series.map((s, i) => [s, i]).reverse().forEach(([s, i]) => {
    if (!s.points.length) return;
    const [y0, y1] = s.own ? range(s.points) : shared;
    g.strokeStyle = g.fillStyle = s.color;
    if (s.own) {
      g.fillText(number(y1), pad + width + 3, pad + 4 + 12 * owned);
      g.fillText(number(y0), pad + width + 3, pad + height - 12 * owned);
      owned += 1;
    }
    g.beginPath();
    s.points.forEach(([x, y], j) => {
      const px = pad + (x - x0) / (x1 - x0) * width;
      const py = pad + height - (y - y0) / (y1 - y0) * height;
      j ? g.lineTo(px, py) : g.moveTo(px, py);
      g.fillRect(px - 2, py - 2, 4, 4);  // a lone point (one validation) shows too
    });
    g.stroke();
    g.fillText(s.name, pad + i * 110, 14);
  });
}

// Sections show only what one of the chosen runs can do.
function showAbilities() {
  const chosen = chosenRuns();
  const can = (ability) => chosen.some((run) => run.can[ability]);
  $("#fill-mask").hidden = !can("fill_mask");
  $("#generate").hidden = !can("generate");
  $("#predict").hidden = !can("predict");
  $("#curves").hidden = !can("metrics");
  $("#attention").hidden = $("#embed").hidden = !chosen.length;
  $("#run-info").textContent = chosen.map((r) => `${r.name}: ${r.task || r.objective}`).join(" · ");
  // what was drawn for the runs chosen before is not these runs' answer
  for (const panes of document.querySelectorAll("section:not(#comparisons) .panes")) {
    panes.replaceChildren();
  }
  showError("");
  drawCurves();
}

// Each comparison's report, as `lmlab compare` wrote it, or a line saying it is under way.
function showComparisons(comparisons) {
  $("#comparisons").hidden = !comparisons.length;
  $("#comparisons .panes").replaceChildren(...comparisons.map((c) => el("div",
    { class: "pane report", "data-comparison": c.name }, el("h3", {}, c.name), c.finished
      ? el("iframe", { src: c.report, title: `${c.name} report` })
      : el("p", {}, "under way: the report appears when its last sub-run is scored"))));
}

async function start() {
  const served = await (await api("/api/runs")).json();
  runs = served.runs;
  showComparisons(served.comparisons);
  for (const run of runs) {
    $("#run-a").append(el("option", {}, run.name));
    $("#run-b").append(el("option", {}, run.name));
  }
  const query = new URLSearchParams(location.search);
  if (query.get("run")) $("#run-a").value = query.get("run");
  if (query.get("beside")) $("#run-b").value = query.get("beside");
  for (const select of [$("#run-a"), $("#run-b")]) select.addEventListener("change", showAbilities);
  showAbilities();
  await pollCurves();
  setInterval(pollCurves, 3000);
}

start().catch((error) => showError(error.message));
