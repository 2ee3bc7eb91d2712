// relserve custom functions for Excel: =RELSERVE.LLM("Is {A} positive? Answer yes or no.", A2)
//
// Excel calls the function once per cell. The calls that arrive within BATCH_WINDOW_MS of each
// other (one recalculation, a column filled down) are sent as ONE request to the relserve
// server's /v1/cells endpoint, which runs them as one relQuery, answers repeated prompts from
// its result cache, and streams each cell's answer back as soon as its row finishes.
//
// The server that served this file fills in its own address and, when the manifest was
// downloaded with ?key=..., the API key.
"use strict";

var RELSERVE_URL = "https://localhost:8443";
var RELSERVE_API_KEY = "__RELSERVE_API_KEY__";
var BATCH_WINDOW_MS = 30;
var MAX_BATCH = 2000;

var queue = [];
var timer = null;
var serial = 0;

function normalize(value) {
  // a blank cell arrives as null or ""; the server reports it as an empty placeholder
  if (value === undefined || value === null || value === "") return null;
  if (Array.isArray(value)) return normalize(value.length ? value[0] : null);
  return value;
}

function cellError(message, code) {
  if (typeof CustomFunctions !== "undefined" && CustomFunctions.Error) {
    return new CustomFunctions.Error(code || CustomFunctions.ErrorCode.invalidValue, String(message).slice(0, 255));
  }
  return new Error(message);
}

function notAvailable(message) {
  var code = typeof CustomFunctions !== "undefined" && CustomFunctions.ErrorCode ? CustomFunctions.ErrorCode.notAvailable : undefined;
  return cellError(message, code);
}

/**
 * @customfunction LLM
 * @param {string} template The prompt with {placeholders}.
 * @param {any[]} values Values for the placeholders, in order.
 * @param {CustomFunctions.CancelableInvocation} invocation
 * @returns {Promise<any>} The model's answer.
 */
function llm(template, values, invocation) {
  var args = (values || []).map(normalize);
  return new Promise(function (resolve, reject) {
    var where = invocation && invocation.address ? invocation.address : "cell";
    var call = { id: where + "#" + (++serial), template: String(template), args: args, resolve: resolve, reject: reject, done: false };
    queue.push(call);
    if (invocation) {
      invocation.onCanceled = function () {
        var i = queue.indexOf(call);
        if (i >= 0) queue.splice(i, 1);  // not sent yet: drop it
        call.done = true;
      };
    }
    if (timer === null) timer = setTimeout(flush, BATCH_WINDOW_MS);
  });
}

function settle(call, cell) {
  if (call.done) return;
  call.done = true;
  if (!cell) call.reject(notAvailable("no answer from the relserve server"));
  else if (cell.error) call.reject(cellError(cell.error));
  else call.resolve(cell.value === null || cell.value === undefined ? "" : cell.value);
}

function flush() {
  timer = null;
  var batch = queue.splice(0, MAX_BATCH);
  if (queue.length) timer = setTimeout(flush, 0);
  if (!batch.length) return Promise.resolve();
  var byId = {};
  batch.forEach(function (c) { byId[c.id] = c; });
  var headers = { "Content-Type": "application/json", "Accept": "application/x-ndjson" };
  if (RELSERVE_API_KEY && RELSERVE_API_KEY.indexOf("__RELSERVE") !== 0) headers["Authorization"] = "Bearer " + RELSERVE_API_KEY;
  var streaming = typeof ReadableStream !== "undefined" && typeof TextDecoder !== "undefined";
  var body = JSON.stringify({
    cells: batch.map(function (c) { return { id: c.id, template: c.template, args: c.args }; }),
    stream: streaming,
  });
  return fetch(RELSERVE_URL + "/v1/cells", { method: "POST", headers: headers, body: body })
    .then(function (res) {
      if (!res.ok) {
        return res.json().then(
          function (b) { throw notAvailable(b && b.error ? b.error.message : "HTTP " + res.status); },
          function () { throw notAvailable("HTTP " + res.status); }
        );
      }
      if (streaming && res.body && res.body.getReader) return readStream(res.body.getReader(), byId);
      return res.json().then(function (b) { b.cells.forEach(function (cell) { settle(byId[cell.id], cell); }); });
    })
    .catch(function (e) {
      batch.forEach(function (c) { if (!c.done) { c.done = true; c.reject(e instanceof Error ? e : notAvailable(String(e))); } });
    })
    .then(function () {
      batch.forEach(function (c) { settle(c, null); });  // nothing may stay pending
    });
}

// NDJSON: {"event": "batch"}, then {"event": "cell", "id", "value", "error", "cached"} per cell, then {"event": "done"}
function readStream(reader, byId) {
  var decoder = new TextDecoder();
  var buf = "";
  function pump() {
    return reader.read().then(function (chunk) {
      if (chunk.value) buf += decoder.decode(chunk.value, { stream: true });
      var nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        var line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line) continue;
        var ev = JSON.parse(line);
        if (ev.event === "cell" && byId[ev.id]) settle(byId[ev.id], ev);
      }
      if (!chunk.done) return pump();
    });
  }
  return pump();
}

if (typeof CustomFunctions !== "undefined") {
  CustomFunctions.associate("LLM", llm);
}
