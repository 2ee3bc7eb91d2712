// relserve sheet: a small grid whose =LLM(...) cells are computed by the relserve server.
// Every recalculation sends its LLM cells as ONE batch to /v1/cells and fills each cell as the
// server streams its answer back (NDJSON); answers the server has seen before come from its
// result cache and arrive first. No build step, nothing fetched from elsewhere.
"use strict";

const ROWS = 20;
const COLS = ["A", "B", "C", "D", "E"];

const raw = {};        // ref -> what the user typed
const shown = {};      // ref -> value used by other cells (answer of a formula, or the raw text)
const sentKey = {};    // ref -> the (template, values) last sent for a formula cell
let active = "A1";
let anchor = "A1";     // selection = rectangle from anchor to active

// the log tests and curious users can read: one entry per batch sent
const log = { batches: [] };
window.relserveSheet = { log, setCell, recalc: () => recalc(true), cellValue: (ref) => shown[ref] };

// ------------------------------------------------------------------ references

function parseRef(ref) {
  const m = /^\$?([A-Z]+)\$?(\d+)$/.exec(ref);
  return m ? { col: COLS.indexOf(m[1]), row: Number(m[2]) } : null;
}
function refOf(col, row) { return COLS[col] + row; }
function cellEl(ref) { return document.getElementById("cell-" + ref); }

// Shift the relative row numbers of the references in a formula (fill down), leaving text
// inside string literals alone.
function shiftFormula(text, dRows) {
  if (!text.startsWith("=")) return text;
  let out = "", i = 0;
  while (i < text.length) {
    const ch = text[i];
    if (ch === '"') {
      let j = i + 1;
      while (j < text.length) {
        if (text[j] === '"' && text[j + 1] === '"') { j += 2; continue; }
        if (text[j] === '"') break;
        j++;
      }
      out += text.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    const m = /^(\$?)([A-Z]{1,2})(\$?)(\d+)/.exec(text.slice(i));
    const prev = i > 0 ? text[i - 1] : "";
    if (m && !/[A-Za-z0-9_.]/.test(prev)) {
      const row = m[3] ? Number(m[4]) : Math.max(1, Number(m[4]) + dRows);
      out += m[1] + m[2] + m[3] + row;
      i += m[0].length;
      continue;
    }
    out += ch;
    i++;
  }
  return out;
}

// ------------------------------------------------------------------ formulas

// =LLM("template", arg, ...): args are cell references, "strings" or numbers.
function parseFormula(text) {
  const src = text.slice(1).trim();
  const head = /^([A-Za-z][A-Za-z0-9_.]*)\s*\(/.exec(src);
  if (!head) throw new Error("a formula looks like =LLM(\"template {A}\", A2)");
  if (head[1].toUpperCase() !== "LLM") throw new Error(`#NAME? unknown function ${head[1]}: only LLM is known`);
  let i = head[0].length;
  const args = [];
  const skip = () => { while (i < src.length && /\s/.test(src[i])) i++; };
  skip();
  if (src[i] === ")") i++;
  else {
    for (;;) {
      skip();
      if (src[i] === '"') {
        let s = "", j = i + 1;
        for (;;) {
          if (j >= src.length) throw new Error("unclosed string in formula");
          if (src[j] === '"' && src[j + 1] === '"') { s += '"'; j += 2; continue; }
          if (src[j] === '"') break;
          s += src[j++];
        }
        args.push({ lit: s });
        i = j + 1;
      } else {
        const m = /^(\$?[A-Z]+\$?\d+|-?\d+(\.\d+)?)/.exec(src.slice(i));
        if (!m) throw new Error(`cannot read argument ${args.length + 1} of the formula`);
        args.push(/^-?\d/.test(m[0]) ? { lit: Number(m[0]) } : { ref: m[0].replaceAll("$", "") });
        i += m[0].length;
      }
      skip();
      if (src[i] === "," || src[i] === ";") { i++; continue; }
      if (src[i] === ")") { i++; break; }
      throw new Error("expected , or ) in the formula");
    }
  }
  skip();
  if (i < src.length) throw new Error("unexpected text after the formula");
  if (!args.length || typeof args[0].lit !== "string") throw new Error("LLM's first argument is the template, in quotes");
  return { template: args[0].lit, args: args.slice(1) };
}

function argValue(a) {
  if ("lit" in a) return a.lit;
  const v = shown[a.ref];
  return v === undefined || v === "" ? null : v;
}

// ------------------------------------------------------------------ showing cells

function paint(ref, text, state, cached, title) {
  const el = cellEl(ref);
  if (!el) return;
  el.textContent = text;
  el.dataset.state = state || "";
  el.dataset.cached = cached ? "true" : "false";
  el.title = title || "";
  if (state === "done" || state === "error") el.dataset.filledAt = String(performance.now());
}

function setCell(ref, text) {
  raw[ref] = text;
  delete sentKey[ref];
  if (!text.startsWith("=")) {
    shown[ref] = text;
    paint(ref, text, "", false, "");
  } else {
    shown[ref] = undefined;
  }
}

function setStatus(text) { document.getElementById("status").textContent = text; }

// ------------------------------------------------------------------ recalculation

let running = null;   // the recalculation in progress
let pending = null;   // another one asked for meanwhile: null, "normal" or "force"

function recalc(force = false) {
  if (running) {
    pending = force || pending === "force" ? "force" : "normal";
    return running;
  }
  running = recalcLoop(force).finally(() => { running = null; });
  return running;
}

async function recalcLoop(force) {
  let f = force;
  for (;;) {
    // chained formulas: a cell whose inputs changed in this pass is sent in the next one
    for (let pass = 0; pass < 8; pass++) {
      const batch = dirtyCells(f);
      f = false;
      if (!batch.length) break;
      await sendBatch(batch);
    }
    if (!pending) return;
    f = pending === "force";
    pending = null;
  }
}

function dirtyCells(force) {
  const out = [];
  for (const ref of Object.keys(raw)) {
    const text = raw[ref];
    if (!text || !text.startsWith("=")) continue;
    let f;
    try { f = parseFormula(text); } catch (e) {
      if (sentKey[ref] !== text) { sentKey[ref] = text; shown[ref] = undefined; paint(ref, "#ERROR", "error", false, e.message); }
      continue;
    }
    const args = f.args.map(argValue);
    const key = JSON.stringify([f.template, args]);
    if (!force && sentKey[ref] === key) continue;
    sentKey[ref] = key;
    out.push({ id: ref, template: f.template, args });
  }
  return out;
}

function headers() {
  const h = { "Content-Type": "application/json", "Accept": "application/x-ndjson" };
  const key = document.getElementById("apikey").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function sendBatch(cells) {
  const entry = { cells: cells.map((c) => c.id), sentAt: performance.now(), events: [] };
  log.batches.push(entry);
  for (const c of cells) paint(c.id, "\u2026", "pending", false, "");
  const maxTokens = Number(document.getElementById("max-tokens").value) || 16;
  setStatus(`sending ${cells.length} cell(s) as one batch...`);
  let res;
  try {
    res = await fetch("/v1/cells", {
      method: "POST",
      headers: headers(),
      body: JSON.stringify({ cells, max_tokens: maxTokens, stream: true }),
    });
  } catch (e) {
    for (const c of cells) fail(c.id, "cannot reach the server: " + e.message);
    setStatus("cannot reach the server");
    return;
  }
  if (!res.ok) {
    let msg = res.status + " " + res.statusText;
    try { msg = (await res.json()).error.message; } catch (e) { /* not JSON */ }
    for (const c of cells) fail(c.id, msg);
    setStatus("the server refused the batch: " + msg);
    return;
  }
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (value) buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) handleEvent(JSON.parse(line), entry);
    }
    if (done) break;
  }
  for (const c of cells) {  // a stream cut short leaves no cell spinning
    if (cellEl(c.id).dataset.state === "pending") fail(c.id, "no answer (the stream ended early)");
  }
}

function fail(ref, message) {
  shown[ref] = undefined;
  paint(ref, "#ERROR", "error", false, message);
}

function handleEvent(ev, entry) {
  entry.events.push({ event: ev.event, at: performance.now(), id: ev.id, cached: ev.cached });
  if (ev.event === "batch") {
    entry.id = ev.id;
    setStatus(`batch ${ev.id}: ${ev.cells} cell(s), ${ev.cached} from the cache, ${ev.engine_rows} prompt(s) to run...`);
  } else if (ev.event === "cell") {
    if (ev.error) { fail(ev.id, ev.error); return; }
    const text = ev.value === null || ev.value === undefined ? "" : String(ev.value);
    shown[ev.id] = text;
    paint(ev.id, text, "done", ev.cached, ev.cached ? "from the result cache" : "");
  } else if (ev.event === "done") {
    const s = ev.stats || {};
    entry.status = ev.status;
    setStatus(`batch ${ev.id} ${ev.status}: ${s.rows} cell(s), ${s.cached_rows} from the cache, ` +
              `${s.engine_rows} run, ${Number(s.latency_s || 0).toFixed(2)} s`);
  }
}

// ------------------------------------------------------------------ the grid and editing

function build() {
  const grid = document.getElementById("grid");
  const head = grid.insertRow();
  head.appendChild(document.createElement("th"));
  for (const c of COLS) { const th = document.createElement("th"); th.textContent = c; head.appendChild(th); }
  for (let r = 1; r <= ROWS; r++) {
    const tr = grid.insertRow();
    const th = document.createElement("th");
    th.textContent = r;
    tr.appendChild(th);
    for (const c of COLS) {
      const td = tr.insertCell();
      td.id = "cell-" + c + r;
      td.dataset.ref = c + r;
      td.className = "col-" + c;
    }
  }
  grid.addEventListener("mousedown", (e) => {
    const td = e.target.closest("td");
    if (!td) return;
    e.preventDefault();
    grid.focus();
    select(td.dataset.ref, e.shiftKey);
  });
  grid.addEventListener("dblclick", () => document.getElementById("formula").focus());
  document.addEventListener("keydown", onKey);
  const formula = document.getElementById("formula");
  formula.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      commit(formula.value);
      const p = parseRef(active);
      select(refOf(p.col, Math.min(p.row + 1, ROWS)), false);
      formula.focus();
    } else if (e.key === "Escape") {
      formula.value = raw[active] || "";
      document.getElementById("grid").focus();
    }
  });
  document.getElementById("fill-down").addEventListener("click", fillDown);
  document.getElementById("recalc").addEventListener("click", () => recalc(true));
  const key = document.getElementById("apikey");
  key.value = new URLSearchParams(location.search).get("key") || localStorage.getItem("relserve.apikey") || "";
  key.addEventListener("change", () => localStorage.setItem("relserve.apikey", key.value.trim()));
  select("A1", false);
}

function select(ref, extend) {
  if (!extend) anchor = ref;
  active = ref;
  const a = parseRef(anchor), b = parseRef(active);
  const [c0, c1] = [Math.min(a.col, b.col), Math.max(a.col, b.col)];
  const [r0, r1] = [Math.min(a.row, b.row), Math.max(a.row, b.row)];
  for (const td of document.querySelectorAll("#grid td")) {
    const p = parseRef(td.dataset.ref);
    td.classList.toggle("selected", p.col >= c0 && p.col <= c1 && p.row >= r0 && p.row <= r1);
    td.classList.toggle("active", td.dataset.ref === active);
  }
  document.getElementById("cellname").textContent = extend && anchor !== active ? `${anchor}:${active}` : active;
  document.getElementById("formula").value = raw[active] || "";
}

function selection() {
  const a = parseRef(anchor), b = parseRef(active);
  return { c0: Math.min(a.col, b.col), c1: Math.max(a.col, b.col), r0: Math.min(a.row, b.row), r1: Math.max(a.row, b.row) };
}

function commit(text) {
  setCell(active, text);
  recalc();
}

// Ctrl+D: the top cell of each selected column, copied down with its references shifted.
function fillDown() {
  const s = selection();
  for (let c = s.c0; c <= s.c1; c++) {
    const top = raw[refOf(c, s.r0)] || "";
    for (let r = s.r0 + 1; r <= s.r1; r++) setCell(refOf(c, r), shiftFormula(top, r - s.r0));
  }
  recalc();
}

function onKey(e) {
  if (document.activeElement && document.activeElement.tagName === "INPUT") return;
  if ((e.ctrlKey || e.metaKey) && (e.key === "d" || e.key === "D")) { e.preventDefault(); fillDown(); return; }
  const p = parseRef(active);
  const moves = { ArrowUp: [0, -1], ArrowDown: [0, 1], ArrowLeft: [-1, 0], ArrowRight: [1, 0] };
  if (moves[e.key]) {
    e.preventDefault();
    const [dc, dr] = moves[e.key];
    const col = Math.min(Math.max(p.col + dc, 0), COLS.length - 1);
    const row = Math.min(Math.max(p.row + dr, 1), ROWS);
    select(refOf(col, row), e.shiftKey);
  } else if (e.key === "Enter" || e.key === "F2") {
    e.preventDefault();
    document.getElementById("formula").focus();
  } else if (e.key === "Delete" || e.key === "Backspace") {
    const s = selection();
    for (let c = s.c0; c <= s.c1; c++) for (let r = s.r0; r <= s.r1; r++) setCell(refOf(c, r), "");
    select(active, true);
    recalc();
  } else if (e.key.length === 1 && !e.ctrlKey && !e.metaKey && !e.altKey) {
    const f = document.getElementById("formula");
    f.value = "";
    f.focus();  // the key press lands in the formula bar, as typing into a cell does
  }
}

build();
