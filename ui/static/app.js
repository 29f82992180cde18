// lockgate's read-only page. It polls GET /locks (one page of the listing),
// GET /metrics, GET /readyz and GET /semaphores/{name} for the semaphores
// named in its box every second and shows what they say. Values from the
// gateway are put into the page as text (textContent), never as HTML.
"use strict";

const POLL_MS = 1000;
// LIST_CALLS bounds the GET /locks calls of one poll: a listing call is
// bounded on the gateway and may answer a short page (even an empty one)
// with a next_cursor; the page asks on until its page is full or the
// listing over, then once more (limit 1) to know whether a next page has
// any lock, so that "Next" never leads to an empty page.
const LIST_CALLS = 20;
const SEM_KEY = "lockgate-semaphores";
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
  // asOf is when the locks shown were listed (this browser's clock), 0
  // before the first listing; failed is why the last refresh failed, ""
  // when it did not. The locks shown stay, marked with their age.
  asOf: 0,
  failed: "",
  // shown names the listing the locks shown are of (prefix, page, page
  // size): the locks of another one are not kept as if they were its.
  shown: "",
  // semaphores are the names of the semaphores the page shows.
  semaphores: [],
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

// listCall asks GET /locks for up to limit locks under prefix from
// cursor. It returns {locks, next} on a 200, {refused: status, detail} on
// a 401 or 403, or {failed: why} (a network error, or another status).
async function listCall(prefix, cursor, limit) {
  const q = new URLSearchParams({ limit: String(limit) });
  if (prefix) q.set("prefix", prefix);
  if (cursor) q.set("cursor", cursor);
  let resp;
  try {
    resp = await fetch("../locks?" + q.toString(), { headers: headers(), cache: "no-store" });
  } catch (e) {
    return { failed: "the gateway cannot be reached" };
  }
  noteSkew(resp);
  if (resp.status === 401 || resp.status === 403) return { refused: resp.status, detail: await problemDetail(resp) };
  if (!resp.ok) return { failed: "GET /locks: " + await problemDetail(resp) };
  try {
    const body = await resp.json();
    return { locks: body.locks || [], next: body.next_cursor || "" };
  } catch (e) {
    return { failed: "GET /locks: the answer is not JSON" };
  }
}

// listPage lists the page of poll gen that starts at cursor: up to limit
// locks under prefix, and the cursor of the next page, "" when no lock
// comes after them (see LIST_CALLS). It stops, answering {}, once a newer
// poll began (another prefix, page or token: its cursors are not this
// listing's).
async function listPage(gen, prefix, cursor, limit) {
  const locks = [];
  let cur = cursor, calls = 0;
  for (;;) {
    const r = await listCall(prefix, cur, Math.min(limit - locks.length, 1000));
    calls++;
    if (gen !== view.gen) return {};
    if (!r.locks) return r;
    locks.push(...r.locks);
    cur = r.next;
    if (!cur || locks.length >= limit || calls >= LIST_CALLS) break;
  }
  if (!cur || locks.length < limit) return { locks, next: cur };
  // A full page: is there a lock after it? A cursor asked again lists at
  // least what it listed before, so the next page starts where a lock was
  // found.
  for (let c = cur; c && calls < LIST_CALLS; calls++) {
    const r = await listCall(prefix, c, 1);
    if (gen !== view.gen) return {};
    if (!r.locks) return r;
    if (r.locks.length > 0) return { locks, next: c };
    c = r.next;
    cur = c;
  }
  return { locks, next: cur };
}

async function loadLocks(gen) {
  if (view.refused !== null && view.refused === token()) return;
  if (view.badPrefix) {
    showStatus(PREFIX_RULE, true);
    return;
  }
  const r = await listPage(gen, view.prefix, view.cursors[view.page], view.limit);
  if (gen !== view.gen) return;
  $("auth").hidden = !r.refused && !token();
  if (r.refused) {
    view.refused = token();
    showStatus((r.refused === 401 ? "This gateway has access control: give a token allowed GET. "
      : "This token may not list locks: it needs GET. ") + r.detail, true);
    view.next = "";
    view.asOf = 0;
    view.failed = "";
    view.shown = "";
    render([]);
    return;
  }
  if (!r.locks) {
    // Nothing fresh to show: the locks shown of this listing stay, marked
    // with their age and why the refresh failed, never under a banner
    // that would make them look current. With none shown yet, say why.
    view.failed = r.failed;
    if (view.shown !== listingKey()) {
      view.asOf = 0;
      view.next = "";
      render([]);
      showStatus(r.failed[0].toUpperCase() + r.failed.slice(1) + ".", true);
    }
    stale();
    return;
  }
  showStatus("", false);
  view.next = r.next;
  view.asOf = Date.now();
  view.failed = "";
  view.shown = listingKey();
  render(r.locks);
  $("updated").textContent = "updated " + new Date(view.asOf).toLocaleTimeString();
}

function listingKey() {
  return JSON.stringify([view.prefix, view.page, view.limit, view.cursors[view.page]]);
}

// stale marks the locks shown with their age while the last refresh
// failed, and clears the mark once one succeeds.
function stale() {
  const on = view.failed !== "" && view.asOf > 0;
  $("locks").classList.toggle("stale", on);
  $("stale").hidden = !on;
  if (on) {
    $("stale").textContent = "As of " + new Date(view.asOf).toLocaleTimeString() + ", " +
      fmtAge(Date.now() - view.asOf) + " ago; the last refresh failed: " + view.failed + ".";
  }
}

// fmtAge is a whole number of seconds ("7 s").
function fmtAge(ms) {
  return Math.max(0, Math.floor(ms / 1000)) + " s";
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
  stale();
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
  for (const td of $("nodes").querySelectorAll("td.since[data-since]")) {
    const since = Number(td.dataset.since);
    td.textContent = clock(since) + " (" + fmtDuration(now - since) + " ago)";
  }
  for (const td of $("semaphores").querySelectorAll("td.left[data-expires]")) {
    td.textContent = fmtDuration(Number(td.dataset.expires) - now);
  }
  stale();
  const rows = $("locks").tBodies[0].rows;
  for (let i = 0; i < rows.length && i < view.locks.length; i++) {
    const l = view.locks[i];
    const left = Math.max(0, l.expires - now);
    const tds = rows[i].cells;
    // From the grant (granted_at, no drift allowance in it): TTL less the
    // time left would overstate it by the allowance expires_at has.
    const granted = Date.parse(l.granted_at || "");
    tds[4].textContent = fmtDuration(isNaN(granted) ? l.ttl_ms - left : now - granted);
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
// cannot tell, or {ready, detail, nodes}: ready on a 200 (a quorum of
// nodes serves), not on a 503; the nodes member of either gives each
// node's state, reason, since and until in the order of the gateway's
// -redis list (no names, no addresses).
async function readiness() {
  let resp;
  try {
    resp = await fetch("../readyz", { cache: "no-store" });
  } catch (e) {
    return null;
  }
  noteSkew(resp);
  if (resp.ok) {
    try {
      const h = await resp.json();
      return { ready: true, detail: "", nodes: Array.isArray(h.nodes) ? h.nodes : [] };
    } catch (e) {
      return { ready: true, detail: "", nodes: [] };
    }
  }
  if (resp.status !== 503) return null;
  try {
    const p = await resp.json();
    return { ready: false, detail: p.detail || "", nodes: Array.isArray(p.nodes) ? p.nodes : [] };
  } catch (e) {
    return { ready: false, detail: "", nodes: [] };
  }
}

// loadNodes shows each node's state from /metrics and, from /readyz, since
// when, why and until when, whose entries lockgate_node_index ties to the
// node names of /metrics.
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
        $("version").textContent = "version " + versionOf(s.labels.version, s.labels.revision);
        break;
    }
  }
  const ready = await readiness();
  for (const [i, r] of (ready ? ready.nodes : []).entries()) {
    // A node /metrics does not name (it always does) keeps its place.
    const n = node(names[i] || "node " + (i + 1));
    n.index = i;
    n.state = r.state || n.state;
    n.reason = r.reason || "";
    n.since = Date.parse(r.since || "");
    n.until = Date.parse(r.until || "");
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
    // Since when a node does not serve (of a serving node: since the
    // gateway started, or it last came back; not shown).
    const since = cell(tr, "", "since");
    if (!isNaN(n.since) && n.state !== "serving") {
      since.dataset.since = String(n.since);
      since.title = new Date(n.since).toISOString() + " (the gateway's clock)";
    }
    const until = cell(tr, "", "until");
    if (!isNaN(n.until)) {
      until.dataset.until = String(n.until);
      until.title = new Date(n.until).toISOString() + " (the gateway's clock)";
    }
    cell(tr, n.behind ? "behind" : "");
    cell(tr, n.reason || n.why.join(", ") || (n.state === "unreachable" ? "does not answer" : ""), "why");
    rows.appendChild(tr);
  }
  tbody.replaceChildren(rows);
  tick();
}

// versionOf names the gateway's build from lockgate_build_info's labels: a
// tagged module version as it is, with its commit; a build from a git work
// tree ("(devel)", or the pseudo-version go build makes of the commit) by
// its commit, 12 hex digits, "+dirty" when the tree had changes; and one
// whose build recorded no commit (go build -buildvcs=false, a GOFLAGS
// with it, or a build outside a git clone; go run and go test record
// none either) says so.
function versionOf(version, revision) {
  const dirty = /-dirty$/.test(revision || "");
  const rev = (revision || "").replace(/-dirty$/, "");
  const known = /^[0-9a-f]{7,}$/.test(rev);
  const short = known ? rev.slice(0, 12) + (dirty ? "+dirty" : "") : "";
  const pseudo = /\d{14}-[0-9a-f]{12}(\+dirty)?$/.test(version || "");
  if (version && version !== "(devel)" && !(pseudo && known)) return version + (short ? " (" + short + ")" : "");
  return short || "unknown (built without a VCS stamp)";
}

// loadSemaphores shows the semaphores named in the semaphores box: each
// one's permits (K), the permits in use and their holders, from GET
// /semaphores/{name} (a 404: no permit held). The gateway has no listing
// of semaphores, hence the names.
async function loadSemaphores(gen) {
  const names = view.semaphores;
  const answers = await Promise.all(names.map(async (name) => {
    try {
      const resp = await fetch("../semaphores/" + encodeURIComponent(name), { headers: headers(), cache: "no-store" });
      if (resp.status === 404) return { name, free: true };
      if (!resp.ok) return { name, failed: await problemDetail(resp) };
      return { name, info: await resp.json() };
    } catch (e) {
      return { name, failed: "the gateway cannot be reached" };
    }
  }));
  if (gen !== view.gen) return;
  const tbody = $("semaphores").tBodies[0];
  const rows = document.createDocumentFragment();
  for (const a of answers) {
    const holders = a.info ? a.info.holders || [] : [];
    for (let i = 0; i < Math.max(1, holders.length); i++) {
      const tr = document.createElement("tr");
      tr.dataset.semaphore = a.name;
      cell(tr, i === 0 ? a.name : "", "resource");
      cell(tr, i > 0 ? "" : a.info ? a.info.in_use + " of " + a.info.permits + " in use"
        : a.free ? "no permit held" : "not read: " + a.failed, "permits");
      const h = holders[i];
      cell(tr, h ? String(h.permit) : "", "num");
      cell(tr, h ? h.owner : "", "owner");
      cell(tr, h ? String(h.fencing_token) : "", "num");
      const left = cell(tr, "", "num left");
      if (h) left.dataset.expires = String(Date.parse(h.expires_at));
      rows.appendChild(tr);
    }
  }
  tbody.replaceChildren(rows);
  $("semaphores").hidden = names.length === 0;
  tick();
}

// clock shows a time of the gateway's clock as this browser's time of day.
function clock(ms) {
  return new Date(ms - view.skewMs).toLocaleTimeString();
}

async function poll() {
  const gen = ++view.gen;
  clearTimeout(view.timer);
  await Promise.all([loadLocks(gen), loadNodes(), loadSemaphores(gen)]);
  if (gen === view.gen && !view.paused) view.timer = setTimeout(poll, POLL_MS);
}

function restart() {
  view.cursors = [""];
  view.page = 0;
  poll();
}

// setSemaphores takes the names of the semaphores box (separated by spaces
// or commas; those that are no resource name are left out).
function setSemaphores(text) {
  view.semaphores = [...new Set(text.split(/[\s,]+/).filter((n) => /^[A-Za-z0-9._:-]{1,200}$/.test(n)))].slice(0, 20);
  try { sessionStorage.setItem(SEM_KEY, view.semaphores.join(" ")); } catch (e) { /* storage off */ }
}

function init() {
  $("filter").addEventListener("submit", (e) => e.preventDefault());
  try { $("sem-names").value = sessionStorage.getItem(SEM_KEY) || ""; } catch (e) { /* storage off */ }
  setSemaphores($("sem-names").value);
  $("sem-form").addEventListener("submit", (e) => {
    e.preventDefault();
    setSemaphores($("sem-names").value);
    poll();
  });
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
