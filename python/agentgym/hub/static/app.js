// agentgym hub: runs, live curves and trajectory replay over the hub's JSON API.
"use strict";

const TOKEN = new URLSearchParams(location.search).get("token");
const DEFAULT_METRICS = ["reward/all", "success/all", "horizon_cap", "loss/total",
  "tokens_per_s", "approx_kl_prox", "loss/entropy", "clip_fraction"];
const PAGE = 50;
const TRACE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf"];

const state = {
  runs: [],
  selected: new Set(),          // run ids whose curves are overlaid
  metrics: new Map(),           // run id -> {rows: [], next: 0, bad: 0}
  shownMetrics: null,           // null until the user picks; then a Set
  traj: {run: null, offset: 0, matched: 0, episode: null, turn: 0},
};

const $ = (id) => document.getElementById(id);

async function api(route, params = {}, body = undefined) {
  const query = new URLSearchParams(params).toString();
  const headers = TOKEN ? {Authorization: `Bearer ${TOKEN}`} : {};
  const init = {headers};
  if (body !== undefined) {
    init.method = "POST";
    init.body = JSON.stringify(body);
    headers["Content-Type"] = "application/json";
  }
  const reply = await fetch(`/api/${route}${query ? "?" + query : ""}`, init);
  const answer = await reply.json();
  if (!reply.ok) throw new Error(answer.error || reply.statusText);
  return answer;
}

function setStatus(text, isError = false) {
  const el = $("status");
  el.textContent = text;
  el.className = isError ? "error" : "";
}

function cell(row, text, className) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (className) td.className = className;
  row.appendChild(td);
  return td;
}

function fmt(x) {
  return typeof x === "number" && !Number.isInteger(x) ? x.toFixed(3) : x;
}

// --- views ----------------------------------------------------------------------------------

function show(view) {
  setStatus("");  // each page says its own; the last page's words would be stale here
  for (const b of document.querySelectorAll("nav button")) {
    b.classList.toggle("active", b.dataset.view === view);
  }
  for (const name of ["runs", "curves", "trajectories", "eval", "play"]) {
    $(`view-${name}`).hidden = name !== view;
  }
  if (view === "curves") refreshCurves().catch(fail);
  if (view === "trajectories") openTrajectories().catch(fail);
  if (view === "play") openPlay().catch(fail);
  if (view === "eval") openEval().catch(fail);
}

function fail(err) {
  setStatus(String(err.message || err), true);
}

// --- runs -----------------------------------------------------------------------------------

async function loadRuns() {
  const {runs} = await api("runs");
  state.runs = runs;
  if (state.selected.size === 0 && runs.length) state.selected.add(runs[runs.length - 1].id);
  const body = $("runs-table").querySelector("tbody");
  body.replaceChildren();
  for (const run of runs) {
    const tr = document.createElement("tr");
    const tick = document.createElement("input");
    tick.type = "checkbox";
    tick.checked = state.selected.has(run.id);
    tick.addEventListener("click", (e) => {
      e.stopPropagation();
      if (tick.checked) state.selected.add(run.id); else state.selected.delete(run.id);
    });
    const td = document.createElement("td");
    td.appendChild(tick);
    tr.appendChild(td);
    cell(tr, run.id);
    const problems = run.problems || [];
    const status = cell(tr, problems.length ? `${run.status} (${problems.length} bad file(s))`
      : run.status, `status-${run.status}`);
    if (problems.length) status.title = problems.join("\n");
    cell(tr, run.env);
    cell(tr, run.algorithm);
    cell(tr, run.max_steps ? `${run.steps} / ${run.max_steps}` : run.steps);
    cell(tr, run.updated ? new Date(run.updated * 1000).toLocaleString() : "");
    tr.addEventListener("click", () => showRun(run.id).catch(fail));
    body.appendChild(tr);
  }
  setStatus(`${runs.length} run(s)`);
}

async function showRun(id) {
  const detail = await api("run", {run: id});
  $("run-detail").hidden = false;
  $("run-detail-title").textContent = `${id} (${detail.overview.status})`;
  $("run-config").textContent = toYaml(detail.config);
  $("run-summary").textContent = JSON.stringify({problems: detail.overview.problems,
    summary: detail.summary, actors: detail.actors}, null, 1);
}

// The run's config as YAML, as config.yaml holds it (the API sends it parsed, as JSON).
function toYaml(value, indent = "") {
  const scalar = (v) => {
    if (v === null || v === undefined) return "null";
    if (typeof v !== "string") return String(v);
    const plain = /^[A-Za-z0-9_./@+-][A-Za-z0-9_ ./@+:-]*$/.test(v) &&
      !/^(null|true|false|yes|no|on|off|~|[-+]?[0-9.]+(e[-+]?[0-9]+)?)$/i.test(v) && !/[ :]$/.test(v);
    return plain ? v : JSON.stringify(v);
  };
  const nested = (v) => v !== null && typeof v === "object" && Object.keys(v).length > 0;
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return value.map((item) => nested(item)
      ? `${indent}- ${toYaml(item, indent + "  ").trimStart()}`
      : `${indent}- ${toYaml(item, indent + "  ")}`).join("\n");
  }
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value);
    if (!keys.length) return "{}";
    return keys.map((k) => nested(value[k])
      ? `${indent}${scalar(k)}:\n${toYaml(value[k], indent + "  ")}`
      : `${indent}${scalar(k)}: ${toYaml(value[k], indent + "  ")}`).join("\n");
  }
  return scalar(value);
}

// --- curves ---------------------------------------------------------------------------------

// Exponential moving average, debiased as TensorBoard's smoothing is (weight 0: the raw curve).
function smooth(ys, weight) {
  let last = 0, debias = 0;
  return ys.map((y) => {
    if (typeof y !== "number") return null;
    last = last * weight + (1 - weight) * y;
    debias = debias * weight + (1 - weight);
    return last / debias;
  });
}

async function pullMetrics(id, wanted) {
  // Columns of the wanted metrics: all of them from line 0 when one is new to this run,
  // else only the lines appended since the last poll.
  const have = state.metrics.get(id) || {columns: {}, keys: [], next: 0, bad: 0};
  const keys = ["step", ...wanted];
  const fresh = keys.some((k) => !(k in have.columns));
  const page = await api("metrics", {run: id, start: fresh ? 0 : have.next, keys: keys.join(",")});
  for (const k of keys) {
    // a metric this run does not have (yet) comes back in page.unknown: null on each line
    const got = page.columns[k] || new Array(page.next - page.start).fill(null);
    have.columns[k] = fresh ? got : have.columns[k].concat(got);
  }
  have.keys = page.keys;
  have.next = page.next;
  have.bad = page.bad_lines;
  state.metrics.set(id, have);
  return have;
}

function metricNames() {
  const names = new Set();
  for (const id of state.selected) {
    for (const k of (state.metrics.get(id) || {keys: []}).keys) if (k !== "step") names.add(k);
  }
  return [...names].sort();
}

function fillMetricSelect(names) {
  const select = $("metric-select");
  const shown = state.shownMetrics || new Set(DEFAULT_METRICS.filter((m) => names.includes(m)));
  const current = [...select.options].map((o) => o.value).join("\n");
  if (current !== names.join("\n")) {
    select.replaceChildren(...names.map((n) => new Option(n, n, false, shown.has(n))));
  }
  return shown;
}

async function refreshCurves() {
  const ids = [...state.selected];
  if (!ids.length) {
    $("metric-note").textContent = "tick a run on the Runs page";
    return;
  }
  const wanted = () => [...(state.shownMetrics || new Set(DEFAULT_METRICS))];
  await Promise.all(ids.map((id) => pullMetrics(id, wanted())));
  const shown = fillMetricSelect(metricNames());
  const bad = ids.map((id) => state.metrics.get(id).bad).reduce((a, b) => a + b, 0);
  $("metric-note").textContent = bad ? `${bad} malformed metrics line(s) skipped` : "";
  const plots = $("plots");
  const drawn = [...shown];
  for (const div of [...plots.children]) if (!shown.has(div.dataset.metric)) div.remove();
  for (const metric of drawn) {
    let div = [...plots.children].find((d) => d.dataset.metric === metric);
    if (!div) {
      div = document.createElement("div");
      div.className = "plot";
      div.dataset.metric = metric;
      plots.appendChild(div);
    }
    const weight = Number($("smoothing").value);
    const traces = ids.flatMap((id, i) => {
      const cols = state.metrics.get(id).columns;
      const y = cols[metric] || [];
      // WebGL past a few thousand points keeps long runs responsive
      const type = y.length > 5000 ? "scattergl" : "scatter";
      const colour = TRACE_COLOURS[i % TRACE_COLOURS.length];
      if (!weight) return [{x: cols.step, y, name: id, mode: "lines", type, line: {color: colour}}];
      // smoothed: the average drawn over the raw curve, which stays visible but faint
      return [{x: cols.step, y, name: `${id} (raw)`, mode: "lines", type, opacity: 0.25,
        line: {color: colour}, showlegend: false, hoverinfo: "skip"},
        {x: cols.step, y: smooth(y, weight), name: id, mode: "lines", type,
          line: {color: colour}}];
    });
    Plotly.react(div, traces, {title: {text: metric}, margin: {t: 40, r: 10, b: 40, l: 50},
      xaxis: {title: {text: "step"}}, showlegend: ids.length > 1,
      legend: {orientation: "h"}}, {responsive: true, displaylogo: false});
  }
  setStatus(`curves of ${ids.length} run(s), ${drawn.length} metric(s)`);
}

// --- run pickers ---------------------------------------------------------------------------

function fillRunSelect(select) {
  const ids = state.runs.map((r) => r.id);
  if ([...select.options].map((o) => o.value).join() !== ids.join()) {
    select.replaceChildren(...ids.map((id) => new Option(id, id)));
    const pick = [...state.selected].pop() || ids[ids.length - 1];
    if (pick) select.value = pick;
  }
}

// --- trajectories ---------------------------------------------------------------------------

const FILTER_IDS = ["env", "group", "task_id", "success", "horizon_cap", "version"];

async function openTrajectories() {
  const select = $("traj-run");
  fillRunSelect(select);
  if (select.value && select.value !== state.traj.run) {
    state.traj.run = select.value;
    state.traj.offset = 0;
    await loadTrajectories();
  }
}

async function loadTrajectories() {
  const params = {run: state.traj.run, offset: state.traj.offset, limit: PAGE};
  for (const f of FILTER_IDS) {
    const v = $(`f-${f}`).value.trim();
    if (v) params[f] = v;
  }
  const page = await api("trajectories", params);
  state.traj.matched = page.matched;
  for (const key of ["env", "group"]) {
    const select = $(`f-${key}`);
    const keep = select.value;
    select.replaceChildren(new Option("any", ""),
      ...page.values[key].filter((v) => v !== "null").map((v) => new Option(v, v)));
    select.value = keep;
  }
  const body = $("traj-table").querySelector("tbody");
  body.replaceChildren();
  for (const row of page.rows) {
    const tr = document.createElement("tr");
    for (const v of [row.index, row.env, row.task_id, row.group, fmt(row.reward),
      row.success ? "yes" : "no", row.num_turns, row.horizon_cap,
      row.version_min === row.version_max ? row.version_min
        : `${row.version_min}-${row.version_max}`]) cell(tr, v);
    tr.addEventListener("click", () => replay(row.index).catch(fail));
    body.appendChild(tr);
  }
  const last = Math.min(state.traj.offset + PAGE, page.matched);
  $("traj-page").textContent = page.matched
    ? `${state.traj.offset + 1}-${last} of ${page.matched}` : "none";
  $("traj-count").textContent = `${page.matched} of ${page.total} sampled episodes` +
    (page.bad_lines ? `, ${page.bad_lines} malformed line(s) skipped` : "");
}

function logprobColour(lp) {
  // exp(lp) in [0, 1] -> red (unlikely) .. green (likely)
  const p = Math.exp(Math.max(-20, Math.min(0, lp)));
  return `hsla(${Math.round(120 * p)}, 70%, 50%, 0.35)`;
}

function renderTurn(turn, k) {
  const div = document.createElement("div");
  div.className = `turn ${turn.kind}`;
  div.dataset.turn = String(k);
  const label = document.createElement("span");
  label.className = "label";
  label.textContent = turn.kind === "reply" ? "model" : "shown to the model";
  div.appendChild(label);
  if (turn.kind === "reply" && turn.pieces) {
    turn.pieces.forEach((piece, i) => {
      const span = document.createElement("span");
      span.className = "tok";
      span.textContent = piece;
      if (turn.logprobs) {
        span.style.background = logprobColour(turn.logprobs[i]);
        span.title = `log-prob ${turn.logprobs[i].toFixed(3)}`;
      }
      div.appendChild(span);
    });
    const parsed = document.createElement("div");
    parsed.className = turn.action !== null ? "action" : "error";
    parsed.textContent = turn.action !== null ? `action: ${turn.action}`
      : `parse error: ${turn.error}`;
    div.appendChild(parsed);
  } else {
    div.appendChild(document.createTextNode(turn.text));
  }
  return div;
}

async function replay(index) {
  const ep = await api("trajectory", {run: state.traj.run, index});
  state.traj.episode = ep;
  $("replay").hidden = false;
  $("replay-title").textContent = `episode ${ep.episode_id}: ${ep.env} task ${ep.task_id}, ` +
    `reward ${fmt(ep.reward)}, ${ep.success ? "success" : ep.truncated ? "truncated" : "failed"}`;
  const turns = $("turns");
  turns.replaceChildren();
  if (!ep.turns.length) {
    const pre = document.createElement("pre");
    pre.textContent = ep.text || "(this sample has no tokens and no text)";
    turns.appendChild(pre);
  }
  ep.turns.forEach((t, k) => turns.appendChild(renderTurn(t, k)));
  const replies = ep.turns.filter((t) => t.kind === "reply").length;
  state.traj.turn = Math.min(1, replies);
  stepTo(state.traj.turn);
}

function stepTo(reply) {
  const ep = state.traj.episode;
  if (!ep) return;
  const replies = ep.turns.filter((t) => t.kind === "reply").length;
  const n = Math.max(0, Math.min(reply, replies));
  state.traj.turn = n;
  // After n replies: the first n replies, and each context turn that precedes reply n + 1
  // (what the model was shown, up to the observation the n-th action produced).
  let before = 0;
  ep.turns.forEach((t, k) => {
    const visible = t.kind === "reply" ? before < n : before <= n;
    $("turns").children[k].classList.toggle("future", !visible);
    if (t.kind === "reply") before += 1;
  });
  $("turn-pos").textContent = `turn ${n} of ${replies}`;
}

// --- eval ---------------------------------------------------------------------------------

const evals = {run: null, list: []};

async function openEval() {
  fillRunSelect($("eval-run"));
  if (!$("eval-run").value) return;
  // Another run's choices do not carry over: results of the same name in two runs are unrelated.
  const sameRun = evals.run === $("eval-run").value;
  evals.run = $("eval-run").value;
  // untrained results (no step: RUN_DIR/model) first, then the checkpoints by step, so the
  // default comparison is the first result against the last: what training changed
  evals.list = (await api("evals", {run: evals.run})).evals.filter((e) => !e.error)
    .map((e, i) => [e, i]).sort(([a, i], [b, j]) => stepKey(a) - stepKey(b) || i - j)
    .map(([e]) => e);
  const names = evals.list.map((e) => e.name);
  const measures = new Set();
  for (const e of evals.list) {
    for (const row of Object.values(e.rows)) Object.keys(row).forEach((m) => measures.add(m));
  }
  const keepMeasure = $("eval-measure").value;
  $("eval-measure").replaceChildren(...[...measures].map((m) => new Option(m, m)));
  const avg = [...measures].find((m) => m.startsWith("avg@"));
  $("eval-measure").value = measures.has(keepMeasure) ? keepMeasure : (avg || [...measures][0]);
  for (const [id, fallback] of [["eval-a", names[0]], ["eval-b", names[names.length - 1]]]) {
    const keep = $(id).value;
    $(id).replaceChildren(...names.map((n) => new Option(n, n)));
    $(id).value = sameRun && names.includes(keep) ? keep : fallback;
  }
  renderEval();
}

function stepKey(result) {
  return result.step === null || result.step === undefined ? -1 : result.step;
}

function evalTitle(e) {
  return e.step !== null && e.step !== undefined ? `${e.name} (step ${e.step})` : e.name;
}

function renderEval() {
  const measure = $("eval-measure").value;
  const head = $("eval-table").querySelector("thead");
  const body = $("eval-table").querySelector("tbody");
  body.replaceChildren();
  if (!evals.list.length) {
    head.replaceChildren();
    $("eval-note").textContent = "no eval results in this run (agentgym eval writes RUN_DIR/eval/)";
    return;
  }
  const a = evals.list.find((e) => e.name === $("eval-a").value);
  const b = evals.list.find((e) => e.name === $("eval-b").value);
  // the two chosen results in the order chosen, their difference, then the other results
  const others = evals.list.filter((e) => e !== a && e !== b);
  const tr = document.createElement("tr");
  for (const name of ["", evalTitle(a), ...(b !== a ? [evalTitle(b)] : []),
    `${b.name} - ${a.name}`, ...others.map(evalTitle)]) {
    const th = document.createElement("th");
    th.textContent = name;
    tr.appendChild(th);
  }
  head.replaceChildren(tr);
  const levels = [];
  for (const e of evals.list) for (const l of Object.keys(e.rows)) if (!levels.includes(l)) levels.push(l);
  const value = (e, level) => (e.rows[level] ? fmt(e.rows[level][measure]) : "");
  // a lower share of invalid replies is the better one
  const sign = measure === "invalid" ? -1 : 1;
  for (const level of levels) {
    const row = document.createElement("tr");
    cell(row, level);
    cell(row, value(a, level));
    if (b !== a) cell(row, value(b, level));
    const va = a.rows[level]?.[measure], vb = b.rows[level]?.[measure];
    const diff = typeof va === "number" && typeof vb === "number" ? vb - va : null;
    const td = cell(row, diff === null ? "" : (diff > 0 ? "+" : "") + diff.toFixed(3));
    if (diff) td.className = sign * diff > 0 ? "better" : "worse";
    for (const e of others) cell(row, value(e, level));
    body.appendChild(row);
  }
  $("eval-note").textContent = `${measure} per level: the two chosen results, the second minus ` +
    "the first, then the run's other results";
  loadEvalTasks().catch(fail);
}

// Episodes of one task under the two chosen results, side by side (agentgym eval keeps them in
// eval/NAME.episodes.jsonl).
async function loadEvalTasks() {
  const a = $("eval-a").value, b = $("eval-b").value;
  const kept = [a, b].filter((n) => evals.list.find((e) => e.name === n)?.has_episodes);
  $("eval-task").replaceChildren();
  $("eval-sides").hidden = !kept.length;
  if (!kept.length) {
    $("eval-task-note").textContent = "these results were saved without their episodes";
    return;
  }
  const tasks = new Map();
  for (const name of kept) {
    for (const t of (await api("eval_episodes", {run: evals.run, name})).tasks) {
      const entry = tasks.get(t.task_id) || {env: t.env, marks: {}};
      entry.marks[name] = t.success.map((s) => (s ? "\u2713" : "\u2717")).join("");
      tasks.set(t.task_id, entry);
    }
  }
  $("eval-task").replaceChildren(...[...tasks].map(([id, t]) => new Option(
    `${t.env} ${id}: ${t.marks[a] ?? "-"} | ${t.marks[b] ?? "-"}`, String(id))));
  $("eval-task-note").textContent = "\u2713/\u2717: each sample's outcome under the first | " +
    "second chosen result";
  await showEvalTask();
}

async function showEvalTask() {
  const task = $("eval-task").value;
  for (const [side, name] of [["a", $("eval-a").value], ["b", $("eval-b").value]]) {
    const box = $(`eval-episodes-${side}`);
    box.replaceChildren();
    $(`eval-side-${side}`).textContent = name;
    if (task === "" || !evals.list.find((e) => e.name === name)?.has_episodes) continue;
    const {episodes} = await api("eval_episodes", {run: evals.run, name, task});
    for (const ep of episodes) {
      const div = document.createElement("div");
      div.className = "episode";
      const head = document.createElement("div");
      head.className = "outcome";
      head.textContent = `${ep.success ? "success" : ep.truncated ? "truncated" : "failed"}, ` +
        `reward ${fmt(ep.reward)}, ${ep.num_turns} turns`;
      div.appendChild(head);
      if (ep.turns.length) ep.turns.forEach((t, k) => div.appendChild(renderTurn(t, k)));
      else div.appendChild(Object.assign(document.createElement("pre"), {textContent: ep.text}));
      box.appendChild(div);
    }
  }
}

// --- play -----------------------------------------------------------------------------------

const play = {envs: [], session: null};

async function openPlay() {
  if (play.envs.length) return;
  const envs = (await api("envs")).envs;
  play.envs = envs.filter((e) => !e.unavailable);
  // An env that cannot start here is listed, disabled, with the reason as its tooltip.
  $("play-env").replaceChildren(...envs.map((e) => {
    const option = new Option(e.unavailable ? `${e.name} (unavailable)` : e.name, e.name);
    option.disabled = Boolean(e.unavailable);
    if (e.unavailable) option.title = e.unavailable;
    return option;
  }));
  showTaskRange();
}

function showTaskRange() {
  const env = play.envs.find((e) => e.name === $("play-env").value);
  $("play-range").textContent = env ? `0 .. ${env.num_tasks - 1}` : "";
}

function showPlay(view, sent) {
  $("play-area").hidden = false;
  const outcome = view.ended ? (view.success ? "success" : "failed") : "";
  const title = $("play-title");
  title.textContent = `${view.env} task ${view.task_id}: step ${view.steps}, ` +
    `reward ${fmt(view.total_reward)}${outcome ? ` (${outcome})` : ""}`;
  title.className = outcome;
  $("play-observation").textContent = view.observation;
  $("play-info").textContent = JSON.stringify(view.info, null, 1);
  drawPicture(view.picture);
  const buttons = view.ended ? [] : view.actions.map((a) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = a;
    b.addEventListener("click", () => act(a).catch(fail));
    return b;
  });
  $("play-actions").replaceChildren(...buttons);
  $("play-input").disabled = view.ended;
  if (sent !== undefined) {
    const li = document.createElement("li");
    li.textContent = `${sent} -> reward ${fmt(view.reward)}` +
      (view.done ? ", done" : view.truncated ? ", truncated" : "");
    $("play-history").appendChild(li);
  }
}

function drawPicture(picture) {
  const box = $("play-picture");
  box.replaceChildren();
  box.hidden = !picture;
  if (picture && picture.kind === "babyai-grid") box.appendChild(gridPicture(picture));
  if (!picture || picture.kind !== "textcraft-tree") return;
  const title = document.createElement("h3");
  title.textContent = "goal tree (from the listed crafting commands)";
  const list = document.createElement("ul");
  list.className = "tree";
  list.appendChild(treeNode(picture.tree, null));
  box.append(title, list);
}

const COLOURS = {R: "#d62728", G: "#2ca02c", B: "#1f77b4", P: "#9467bd", Y: "#e5c100",
  E: "#7f7f7f"};
const SYMBOLS = {K: "\u26B7", A: "\u25CF", B: "\u25A1", G: "", V: "~", D: "", d: "", L: "\u26BF"};
const ARROWS = ["\u25B6", "\u25BC", "\u25C0", "\u25B2"];  // east, south, west, north

function inView(x, y, [ax, ay], dir) {
  // minigrid's 7x7 view: 6 cells ahead, 3 to each side (occlusion by walls not drawn)
  const ahead = [x - ax, y - ay, ax - x, ay - y][dir];
  const side = dir % 2 === 0 ? y - ay : x - ax;
  return ahead >= 0 && ahead <= 6 && Math.abs(side) <= 3;
}

function gridPicture(pic) {
  const wrap = document.createElement("div");
  const title = document.createElement("h3");
  title.textContent = "map (shaded: the agent's 7x7 view)";
  const grid = document.createElement("div");
  grid.className = "bgrid";
  const width = pic.rows.length ? pic.rows[0].length / 2 : 0;
  grid.style.gridTemplateColumns = `repeat(${width}, 22px)`;
  pic.rows.forEach((row, y) => {
    for (let x = 0; x < width; x++) {
      const kind = row[2 * x], colour = COLOURS[row[2 * x + 1]] || "#000";
      const cellDiv = document.createElement("div");
      cellDiv.className = "bcell";
      cellDiv.dataset.x = String(x);
      cellDiv.dataset.y = String(y);
      if (pic.agent && inView(x, y, pic.agent, pic.dir)) cellDiv.classList.add("view");
      if (kind === "W") cellDiv.style.background = "#555";
      else if (kind === "G") cellDiv.style.background = colour;
      else if ("DdL".includes(kind)) {
        cellDiv.style.border = `3px ${kind === "d" ? "dashed" : "solid"} ${colour}`;
        cellDiv.textContent = SYMBOLS[kind];
      } else if (kind !== " ") {
        cellDiv.style.color = colour;
        cellDiv.textContent = SYMBOLS[kind] ?? kind;
      }
      if (pic.agent && pic.agent[0] === x && pic.agent[1] === y) {
        cellDiv.textContent = ARROWS[pic.dir] ?? "?";
        cellDiv.classList.add("agent");
      }
      grid.appendChild(cellDiv);
    }
  });
  const held = document.createElement("p");
  held.className = "hint";
  held.textContent = pic.carrying ? `carrying a ${pic.carrying.color} ${pic.carrying.type}`
    : "carrying nothing";
  wrap.append(title, grid, held);
  return wrap;
}

function treeNode(node, need) {
  const li = document.createElement("li");
  const label = document.createElement("span");
  const enough = need !== null && node.have >= need;
  label.className = enough ? "have" : "";
  label.textContent = `${need !== null ? need + " x " : ""}${node.item} (have ${node.have})` +
    (node.recipes.length ? "" : ": get it");
  li.appendChild(label);
  for (const recipe of node.recipes) {
    const ul = document.createElement("ul");
    const head = document.createElement("li");
    head.className = "recipe";
    head.textContent = `craft ${recipe.count} from:`;
    const parts = document.createElement("ul");
    for (const ing of recipe.ingredients) parts.appendChild(treeNode(ing, ing.need));
    head.appendChild(parts);
    ul.appendChild(head);
    li.appendChild(ul);
  }
  return li;
}

async function startPlay() {
  const task = Number($("play-task").value);
  const view = await api("play", {}, {env: $("play-env").value, task_id: task});
  play.session = view.session;
  $("play-history").replaceChildren();
  showPlay(view);
  setStatus(`playing ${view.env} task ${view.task_id}`);
}

async function act(action) {
  const view = await api("play/step", {}, {session: play.session, action});
  showPlay(view, view.sent);
}

// --- wiring ---------------------------------------------------------------------------------

function wire() {
  for (const b of document.querySelectorAll("nav button")) {
    b.addEventListener("click", () => show(b.dataset.view));
  }
  $("metric-select").addEventListener("change", () => {
    state.shownMetrics = new Set([...$("metric-select").selectedOptions].map((o) => o.value));
    refreshCurves().catch(fail);
  });
  $("traj-run").addEventListener("change", () => {
    state.traj.run = $("traj-run").value;
    state.traj.offset = 0;
    loadTrajectories().catch(fail);
  });
  $("traj-apply").addEventListener("click", () => {
    state.traj.offset = 0;
    loadTrajectories().catch(fail);
  });
  $("traj-prev").addEventListener("click", () => {
    state.traj.offset = Math.max(0, state.traj.offset - PAGE);
    loadTrajectories().catch(fail);
  });
  $("traj-next").addEventListener("click", () => {
    if (state.traj.offset + PAGE < state.traj.matched) state.traj.offset += PAGE;
    loadTrajectories().catch(fail);
  });
  $("eval-run").addEventListener("change", () => openEval().catch(fail));
  for (const id of ["eval-measure", "eval-a", "eval-b"]) {
    $(id).addEventListener("change", renderEval);
  }
  $("eval-task").addEventListener("change", () => showEvalTask().catch(fail));
  $("smoothing").addEventListener("input", () => {
    $("smoothing-value").textContent = Number($("smoothing").value).toFixed(2);
    refreshCurves().catch(fail);
  });
  $("play-env").addEventListener("change", showTaskRange);
  $("play-start").addEventListener("click", () => startPlay().catch(fail));
  $("play-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const text = $("play-input").value;
    $("play-input").value = "";
    if (text.trim()) act(text).catch(fail);
  });
  $("turn-first").addEventListener("click", () => stepTo(0));
  $("turn-prev").addEventListener("click", () => stepTo(state.traj.turn - 1));
  $("turn-next").addEventListener("click", () => stepTo(state.traj.turn + 1));
  $("turn-last").addEventListener("click", () => stepTo(Infinity));
  setInterval(() => {
    if (!$("view-curves").hidden && $("live").checked) refreshCurves().catch(fail);
    if (!$("view-runs").hidden) loadRuns().catch(fail);
  }, 2000);
}

wire();
loadRuns().catch(fail);
