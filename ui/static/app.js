// lockgate's read-only page. It polls GET /locks (one page of the listing)
// and GET /metrics every second and shows what they say. Values from the
// gateway are put into the page as text (textContent), never as HTML.
"use strict";

const POLL_MS = 1000;
const PREFIX_RE = /^[A-Za-z0-9._:-]{0,200}$/;
const PREFIX_RULE = "A prefix is up to 200 characters of A-Z a-z 0-9 . _ : -";
const TOKEN_KEY = "lockgate-token";

const $ = (id) => document.getElementById(id);

const view = {
  prefix: "",
  limit: 100,
  // cursors[i] is the cursor that asks for page i (page 0: none).
  cursors: [""],
  page: 0,
  next: "",
  locks: [],
  // skewMs is the gateway's clock minus the browser's, from the Date
  // header, counted only when over a second (the header has 1 s steps).
  skewMs: 0,
  paused: false,
  timer: 0,
  // gen counts polls: an answer to an older poll (another prefix, page or
  // token) is dropped, and only the newest poll schedules the next.
  gen: 0,
  // refused is the token (maybe "") that GET /locks last answered 401 to:
  // the page asks no more with it, until the user gives another.
  refused: null,
  // badPrefix is set while the prefix box holds what no name starts with.
  badPrefix: false,
};

function token() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; }
}

function headers() {
  const h = { Accept: "application/json" };
  const t = token();
  if (t) h.Authorization = "Bearer " + t;
  return h;
}

function showStatus(text, isError) {
  const s = $("status");
  s.hidden = !text;
  s.textContent = text || "";
  s.className = "status" + (isError ? " error" : "");
}

async function problemDetail(resp) {
  try {
    const p = await resp.json();
    return (p.title || resp.statusText) + (p.detail ? ": " + p.detail : "");
  } catch (e) {
    return resp.status + " " + resp.statusText;
  }
}

function noteSkew(resp) {
  const d = Date.parse(resp.headers.get("Date") || "");
  if (!isNaN(d)) {
    const skew = d - Date.now();
    view.skewMs = Math.abs(skew) > 1500 ? skew : 0;
  }
}

async function loadLocks(gen) {
  if (view.refused !== null && view.refused === token()) return;
  if (view.badPrefix) {
    showStatus(PREFIX_RULE, true);
    return;
  }
  const q = new URLSearchParams({ limit: String(view.limit) });
  if (view.prefix) q.set("prefix", view.prefix);
  const cursor = view.cursors[view.page];
  if (cursor) q.set("cursor", cursor);
  let resp;
  try {
    resp = await fetch("../locks?" + q.toString(), { headers: headers(), cache: "no-store" });
  } catch (e) {
    if (gen === view.gen) showStatus("The gateway cannot be reached.", true);
    return;
  }
  if (gen !== view.gen) return;
  noteSkew(resp);
  $("auth").hidden = resp.status !== 401 && resp.status !== 403 && !token();
  if (resp.status === 401 || resp.status === 403) {
    view.refused = token();
    showStatus((resp.status === 401 ? "This gateway has access control: give a token allowed GET. "
      : "This token may not list locks: it needs GET. ") + await problemDetail(resp), true);
    render([]);
    return;
  }
  if (!resp.ok) {
    showStatus("GET /locks: " + await problemDetail(resp), true);
    return;
  }
  const body = await resp.json();
  if (gen !== view.gen) return;
  showStatus("", false);
  view.next = body.next_cursor || "";
  render(body.locks || []);
  $("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

function fmtDuration(ms) {
  if (ms <= 0) return "0s";
  if (ms < 10000) return (ms / 1000).toFixed(1) + "s";
  const s = Math.round(ms / 1000);
  if (s < 120) return s + "s";
  const m = Math.floor(s / 60);
  if (m < 120) return m + "m " + (s % 60) + "s";
  return Math.floor(m / 60) + "h " + (m % 60) + "m";
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function render(locks) {
  // Sorted within the page so that rows stay put from one poll to the next.
  view.locks = locks.map((l) => ({ ...l, expires: Date.parse(l.expires_at) }))
    .sort((a, b) => (a.resource < b.resource ? -1 : a.resource > b.resource ? 1 : 0));
  const tbody = $("locks").tBodies[0];
  const rows = document.createDocumentFragment();
  for (const l of view.locks) {
    const tr = document.createElement("tr");
    tr.dataset.resource = l.resource;
    cell(tr, l.resource, "resource");
    cell(tr, l.owner, "owner");
    cell(tr, String(l.fencing_token), "num");
    cell(tr, fmtDuration(l.ttl_ms), "num");
    cell(tr, "", "num held");
    cell(tr, "", "num left");
    rows.appendChild(tr);
  }
  tbody.replaceChildren(rows);
  tick();
  $("empty").hidden = view.locks.length > 0;
  $("page").textContent = "page " + (view.page + 1) + (view.next ? "" : " (last)");
  $("prev").disabled = view.page === 0;
  $("next").disabled = !view.next;
}

// tick updates the held and left columns, and the nodes' time until they
// serve again, between polls.
function tick() {
  const now = Date.now() + view.skewMs;
  for (const td of $("nodes").querySelectorAll("td.until[data-until]")) {
    const until = Number(td.dataset.until);
    td.textContent = clock(until) + " (in " + fmtDuration(until - now) + ")";
  }
  const rows = $("locks").tBodies[0].rows;
  for (let i = 0; i < rows.length && i < view.locks.length; i++) {
    const l = view.locks[i];
    const left = Math.max(0, l.expires - now);
    const tds = rows[i].cells;
    tds[4].textContent = fmtDuration(l.ttl_ms - left);
    tds[5].textContent = fmtDuration(left);
    tds[5].classList.toggle("expiring", left < 2000);
  }
}

// parseMetrics reads the lockgate_* samples of a Prometheus text page.
function parseMetrics(text) {
  const out = [];
  const labelRe = /(\w+)="((?:[^"\\]|\\.)*)"/g;
  for (const line of text.split("\n")) {
    if (!line.startsWith("lockgate_")) continue;
    const m = /^(\w+)(?:\{(.*)\})? (\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    for (const lm of (m[2] || "").matchAll(labelRe)) {
      labels[lm[1]] = lm[2].replace(/\\"/g, "\"").replace(/\\n/g, "\n").replace(/\\\\/g, "\\");
    }
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

// readiness asks /readyz, which needs no token. It returns null when it
// cannot tell, {ready: true} on a 200 (a quorum of nodes serves; the answer
// has no detail), or {ready: false, detail, nodes} on a 503, whose nodes
// member gives each node's state, reason, since and until in the order of
// the gateway's -redis list (no names, no addresses).
async function readiness() {
  let resp;
  try {
    resp = await fetch("../readyz", { cache: "no-store" });
  } catch (e) {
    return null;
  }
  noteSkew(resp);
  if (resp.ok) return { ready: true, detail: "", nodes: [] };
  if (resp.status !== 503) return null;
  try {
    const p = await resp.json();
    return { ready: false, detail: p.detail || "", nodes: Array.isArray(p.nodes) ? p.nodes : [] };
  } catch (e) {
    return { ready: false, detail: "", nodes: [] };
  }
}

// loadNodes shows each node's state from /metrics and, while a node does
// not serve, why and until when from /readyz, whose entries
// lockgate_node_index ties to the node names of /metrics. /readyz is asked
// only then: while every node serves it has nothing to add.
async function loadNodes() {
  let text;
  try {
    const resp = await fetch("../metrics", { cache: "no-store" });
    if (!resp.ok) throw new Error(String(resp.status));
    text = await resp.text();
  } catch (e) {
    $("summary").textContent = "Node states come from /metrics, which this page cannot read.";
    return;
  }
  const nodes = new Map();
  const node = (name) => {
    if (!nodes.has(name)) nodes.set(name, { index: Infinity, state: "", behind: false, why: [], reason: "", since: NaN, until: NaN });
    return nodes.get(name);
  };
  const names = [];
  let quorum = "?", count = "?", waiters = "?";
  for (const s of parseMetrics(text)) {
    switch (s.name) {
      case "lockgate_node_state":
        if (s.value === 1) node(s.labels.node).state = s.labels.state;
        break;
      case "lockgate_node_behind":
        node(s.labels.node).behind = s.value === 1;
        break;
      case "lockgate_node_refusing":
        if (s.value === 1) node(s.labels.node).why.push(s.labels.reason);
        break;
      case "lockgate_node_index":
        names[s.value] = s.labels.node;
        node(s.labels.node).index = s.value;
        break;
      case "lockgate_quorum": quorum = String(s.value); break;
      case "lockgate_nodes": count = String(s.value); break;
      case "lockgate_waiters": waiters = String(s.value); break;
      case "lockgate_build_info":
        $("version").textContent = "version " + s.labels.version + " (" + s.labels.revision + ")";
        break;
    }
  }
  let ready = null;
  if (nodes.size === 0 || [...nodes.values()].some((n) => n.state !== "serving")) {
    ready = await readiness();
    for (const [i, r] of (ready ? ready.nodes : []).entries()) {
      // A node /metrics does not name (it always does) keeps its place.
      const n = node(names[i] || "node " + (i + 1));
      n.index = i;
      n.state = r.state || n.state;
      n.reason = r.reason || "";
      n.since = Date.parse(r.since || "");
      n.until = Date.parse(r.until || "");
    }
  }
  const serving = [...nodes.values()].filter((n) => n.state === "serving").length;
  let summary = serving + " of " + count + " nodes serving; a lock needs " + quorum + ".";
  if (ready && !ready.ready) {
    summary += ready.nodes.length ? " Not ready: no lock can be taken or extended until " + quorum + " serve."
      : " Not ready: " + (ready.detail || "/readyz answers 503") + ".";
  }
  $("summary").textContent = summary + " Acquires waiting on this replica: " + waiters + ".";
  $("not-ready").hidden = !(ready && !ready.ready);
  const tbody = $("nodes").tBodies[0];
  const rows = document.createDocumentFragment();
  // In the configured (-redis) order, as the gateway's log and /readyz.
  const order = (a, b) => (a[1].index - b[1].index) || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
  for (const [name, n] of [...nodes.entries()].sort(order)) {
    const tr = document.createElement("tr");
    tr.dataset.node = name;
    cell(tr, name);
    const st = cell(tr, "");
    const badge = document.createElement("span");
    badge.className = "state state-" + (n.state || "unknown");
    badge.textContent = n.state || "not checked yet";
    st.appendChild(badge);
    cell(tr, isNaN(n.since) ? "" : clock(n.since), "since");
    const until = cell(tr, "", "until");
    if (!isNaN(n.until)) {
      until.dataset.until = String(n.until);
      until.title = new Date(n.until).toISOString() + " (the gateway's clock)";
    }
    cell(tr, n.behind ? "behind" : "");
    cell(tr, n.reason || n.why.join(", ") || (n.state === "unreachable" ? "does not answer (the gateway's log says why)" : ""), "why");
    rows.appendChild(tr);
  }
  tbody.replaceChildren(rows);
  tick();
}

// clock shows a time of the gateway's clock as this browser's time of day.
function clock(ms) {
  return new Date(ms - view.skewMs).toLocaleTimeString();
}

async function poll() {
  const gen = ++view.gen;
  clearTimeout(view.timer);
  await Promise.all([loadLocks(gen), loadNodes()]);
  if (gen === view.gen && !view.paused) view.timer = setTimeout(poll, POLL_MS);
}

function restart() {
  view.cursors = [""];
  view.page = 0;
  poll();
}

function init() {
  $("filter").addEventListener("submit", (e) => e.preventDefault());
  $("prefix").addEventListener("input", () => {
    const v = $("prefix").value.trim();
    view.badPrefix = !PREFIX_RE.test(v);
    if (view.badPrefix) {
      showStatus(PREFIX_RULE, true);
      return;
    }
    view.prefix = v;
    restart();
  });
  $("limit").addEventListener("change", () => {
    view.limit = Number($("limit").value);
    restart();
  });
  $("next").addEventListener("click", () => {
    if (!view.next) return;
    view.cursors[view.page + 1] = view.next;
    view.page++;
    poll();
  });
  $("prev").addEventListener("click", () => {
    if (view.page === 0) return;
    view.page--;
    poll();
  });
  $("pause").addEventListener("click", () => {
    view.paused = !view.paused;
    $("pause").textContent = view.paused ? "Resume" : "Pause";
    if (!view.paused) poll();
    else clearTimeout(view.timer);
  });
  $("auth-form").addEventListener("submit", (e) => {
    e.preventDefault();
    try { sessionStorage.setItem(TOKEN_KEY, $("token").value.trim()); } catch (err) { /* storage off */ }
    $("token").value = "";
    view.refused = null;
    restart();
  });
  $("forget").addEventListener("click", () => {
    try { sessionStorage.removeItem(TOKEN_KEY); } catch (err) { /* storage off */ }
    view.refused = null;
    restart();
  });
  setInterval(tick, 250);
  poll();
}

init();
