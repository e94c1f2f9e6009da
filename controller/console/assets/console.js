// berth operator console. Plain JS, no dependencies: every call goes to
// this origin's /v1 API with the bearer token from sessionStorage.
"use strict";

const TOKEN_KEY = "berth.token";
const REFRESH_MS = 2000; // runs and resources
const RETRY_MS = 2000;   // reconnecting the event stream

let token = sessionStorage.getItem(TOKEN_KEY);
let selected = null;   // id of the selected run
let stream = null;     // AbortController of the selected run's event stream
let timer = null;

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  add(e, ...children);
  return e;
}

// add appends the children that are not null or undefined.
function add(parent, ...children) {
  for (const c of children) {
    if (c !== null && c !== undefined) parent.append(c instanceof Node ? c : String(c));
  }
}

function status(msg, isError) {
  const s = $("#status");
  s.textContent = msg;
  s.classList.toggle("error", !!isError);
}

function headers(extra) {
  const h = Object.assign({}, extra);
  if (token) h["Authorization"] = "Bearer " + token;
  return h;
}

// api calls the /v1 API and returns the decoded JSON, or throws an Error
// carrying berth's message.
async function api(method, path, body) {
  const init = { method, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  const resp = await fetch(path, init);
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!resp.ok) {
    const msg = data && data.error ? data.error.code + ": " + data.error.message : resp.status + " " + text;
    const err = new Error(msg);
    err.status = resp.status;
    throw err;
  }
  return data;
}

async function refresh() {
  if (token === null) return;
  try {
    const data = await api("GET", "/v1/runs");
    renderRuns(data.runs || []);
    if (selected) {
      if (!(data.runs || []).some((r) => r.id === selected)) {
        select(null);
      } else {
        await Promise.all([refreshResources(), refreshCards()]);
      }
    }
    status("Connected: " + (data.runs || []).length + " open run(s).");
  } catch (e) {
    status(e.message, true);
    if (e.status === 401) stop();
  }
}

function renderRuns(runs) {
  const tbody = $("#runs tbody");
  tbody.replaceChildren(...runs.map((r) => {
    const tr = el("tr", { class: r.id === selected ? "selected" : "" },
      el("td", {}, el("button", { class: "run", type: "button", dataset: { id: r.id }, title: "show this run", onclick: () => select(r.id) }, r.id.slice(0, 12)),
        r.conversation_id ? el("div", { class: "small" }, "conversation " + r.conversation_id) : null),
      el("td", {}, r.sandbox, el("div", { class: "small" }, r.placement || "")),
      el("td", {}, r.workspace),
      el("td", {}, r.mode + (r.vibe ? " + vibe" : "")),
      el("td", { class: "small when" }, new Date(r.opened).toLocaleTimeString()));
    return tr;
  }));
  $("#no-runs").hidden = runs.length > 0;
}

async function refreshResources() {
  const id = selected;
  const data = await api("GET", "/v1/runs/" + id + "/resources");
  if (id !== selected) return;
  const list = data.resources || [];
  $("#resources tbody").replaceChildren(...list.map((r) =>
    el("tr", {}, el("td", {}, r.kind), el("td", {}, r.name), el("td", {}, r.state), el("td", { class: "small" }, r.detail || ""))));
  $("#no-resources").hidden = list.length > 0;
}

async function refreshCards() {
  const id = selected;
  let data;
  try {
    data = await api("GET", "/v1/runs/" + id + "/cards");
  } catch (e) {
    if (e.status === 404) { renderCards([]); return; } // the run has no question port
    throw e;
  }
  if (id !== selected) return;
  renderCards(data.cards || []);
}

function renderCards(cards) {
  const box = $("#cards");
  // Keep cards already shown, so a half-typed answer survives a refresh.
  const want = new Set(cards.map((c) => String(c.n)));
  for (const c of Array.from(box.children)) {
    if (!want.has(c.dataset.n)) c.remove();
  }
  for (const c of cards) {
    if (!box.querySelector('.card[data-n="' + c.n + '"]')) box.append(renderCard(c));
  }
  $("#no-cards").hidden = cards.length > 0;
}

function renderCard(c) {
  const card = el("div", { class: "card " + c.kind, dataset: { n: String(c.n), kind: c.kind } });
  const err = el("div", { class: "error" });
  const answer = async (body) => {
    err.textContent = "";
    try {
      await api("POST", "/v1/runs/" + selected + "/cards/" + c.n, body);
      card.remove();
      $("#no-cards").hidden = $("#cards").children.length > 0;
    } catch (e) {
      err.textContent = e.message;
    }
  };
  const deadline = c.deadline ? el("div", { class: "small" }, "times out at " + new Date(c.deadline).toLocaleTimeString()) : null;
  if (c.kind === "permission") {
    // The detail is the whole call, written by the caller: it goes in as
    // text (textContent), never as markup, in a box that scrolls.
    let shown = null;
    if (c.detail || c.summary) {
      shown = el("pre", { class: c.detail ? "detail" : "summary", tabindex: "0" });
      shown.textContent = c.detail || c.summary;
    }
    const deny = el("button", { type: "button", class: "decision deny", dataset: { decision: "deny" }, onclick: () => answer({ decision: "deny" }) }, "Deny");
    // A call too large to show whole can only be denied: nothing is
    // approved that was not shown.
    const actions = c.too_large ? el("div", { class: "actions" }, deny,
      el("span", { class: "small too-large" }, "too large to show whole: it can only be denied"))
      : el("div", { class: "actions" },
        el("button", { type: "button", class: "decision", dataset: { decision: "approve" }, onclick: () => answer({ decision: "approve" }) }, "Approve"),
        deny,
        el("button", { type: "button", class: "decision", dataset: { decision: "allow_run" }, onclick: () => answer({ decision: "allow_run" }) }, "Allow " + c.tool + " for this run"));
    add(card,
      el("div", { class: "question" }, "May " + c.tool + " (" + c.level + ") run?"),
      shown,
      deadline,
      actions,
      err);
    return card;
  }
  add(card, el("div", { class: "question" }, c.question), c.context ? el("div", { class: "small" }, c.context) : null, deadline);
  const actions = el("div", { class: "actions" });
  const opts = c.options || [];
  if (c.multi_select) {
    const boxes = opts.map((o) => el("input", { type: "checkbox", value: o.label }));
    opts.forEach((o, i) => add(actions, el("label", { title: o.description || "" }, boxes[i], " " + o.label)));
    add(actions, el("button", { type: "button", class: "choose", onclick: () => answer({ choice: boxes.filter((b) => b.checked).map((b) => b.value) }) }, "Choose"));
  } else {
    for (const o of opts) {
      add(actions, el("button", { type: "button", class: "option", dataset: { label: o.label }, title: o.description || "", onclick: () => answer({ choice: [o.label] }) }, o.label));
    }
  }
  add(card, actions);
  if (c.allow_free_text) {
    const input = el("input", { type: "text", class: "free-text", placeholder: "type an answer" });
    add(card, el("div", { class: "actions" }, input,
      el("button", { type: "button", class: "send-text", onclick: () => answer({ text: input.value }) }, "Send")));
  }
  add(card, el("div", { class: "actions" }, el("button", { type: "button", class: "skip", onclick: () => answer({ skip: true }) }, "Skip")), err);
  return card;
}

// follow reads the run's event stream with a streaming fetch (EventSource
// cannot send the Authorization header) and refreshes the cards on every
// card event. Following the stream is what makes the run count as having
// someone to ask.
async function follow(id, ctl) {
  const badge = $("#stream");
  while (!ctl.signal.aborted) {
    try {
      const resp = await fetch("/v1/runs/" + id + "/events", { headers: headers({ Accept: "text/event-stream" }), signal: ctl.signal });
      if (!resp.ok) {
        if (resp.status === 404) { badge.textContent = "no event stream"; return; }
        throw new Error("events: " + resp.status);
      }
      badge.textContent = "following";
      badge.classList.add("live");
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const type = (block.split("\n").find((l) => l.startsWith("event: ")) || "").slice(7);
          if (type === "closed") { badge.textContent = "run closed"; badge.classList.remove("live"); return; }
          if (type.startsWith("card.") && id === selected) refreshCards().catch((e) => status(e.message, true));
          if (type === "vibe.worker" && id === selected) refreshResources().catch(() => {});
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
      status("event stream: " + e.message + "; reconnecting", true);
    }
    badge.textContent = "reconnecting";
    badge.classList.remove("live");
    await new Promise((r) => setTimeout(r, RETRY_MS));
  }
}

function select(id) {
  if (stream) stream.abort();
  stream = null;
  selected = id;
  $("#run-panel").hidden = !id;
  $("#cards").replaceChildren();
  $("#resources tbody").replaceChildren();
  for (const b of document.querySelectorAll("#runs button.run")) {
    b.closest("tr").classList.toggle("selected", b.dataset.id === id);
  }
  if (!id) return;
  $("#run-id").textContent = id;
  $("#stream").textContent = "connecting";
  stream = new AbortController();
  follow(id, stream);
  refresh();
}

function start() {
  stop();
  refresh();
  timer = setInterval(refresh, REFRESH_MS);
}

function stop() {
  if (timer) clearInterval(timer);
  timer = null;
  select(null);
}

$("#login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  token = $("#token").value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  $("#token").value = "";
  status("Connecting…");
  start();
});

$("#forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  token = null;
  stop();
  $("#runs tbody").replaceChildren();
  status("Not connected.");
});

if (token !== null) start();
