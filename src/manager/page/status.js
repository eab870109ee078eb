// The manager's status page: fetches status.json every second and redraws.
// Everything from the server goes in as text (textContent, attributes set
// one by one), never as markup: keys and error messages are user data.
"use strict";

const PERIOD_MS = 1000;
let generation = 0;
let lastOk = null;

function el(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (value !== null && value !== undefined && value !== false) {
      node.setAttribute(name, String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value < 0.001) return (value * 1e6).toFixed(0) + " µs";
  if (value < 1) return (value * 1e3).toFixed(1) + " ms";
  if (value < 120) return value.toFixed(1) + " s";
  if (value < 7200) return (value / 60).toFixed(1) + " min";
  return (value / 3600).toFixed(1) + " h";
}

function table(headers, rows, empty) {
  if (rows.length === 0) return el("p", { class: "muted" }, empty);
  return el("table", {}, el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function badge(id, label, probe) {
  const node = document.getElementById(id);
  node.textContent = label + (probe.ok ? " ok" : " failing");
  node.className = "badge " + (probe.ok ? "ok" : "bad");
  node.title = probe.text;
}

function inFlight(controller) {
  return table(["key in flight", "for", ""], controller.keys_in_flight.map((k) =>
    el("tr", { class: k.stuck ? "in-flight stuck" : "in-flight", "data-key": k.key },
      el("td", { class: "key" }, k.key), el("td", {}, seconds(k.age_seconds)),
      el("td", { class: "flag" }, k.stuck ? "stuck" : ""))), "no key in flight");
}

function reconciles(list, empty) {
  return table(["key", "trigger", "attempt", "waited", "started", "took", "outcome", "error"], list.map((r) =>
    el("tr", { class: r.error === null ? "reconcile" : "reconcile failed", "data-key": r.key },
      el("td", { class: "key" }, r.key), el("td", {}, r.triggers), el("td", {}, r.attempt),
      el("td", {}, seconds(r.waited_seconds)),
      el("td", {}, seconds(r.ago_seconds) + " ago"), el("td", {}, seconds(r.took_seconds)),
      el("td", { class: "outcome" }, r.outcome), el("td", { class: "message" }, r.error ?? ""))),
  empty);
}

function controllerCard(c) {
  const state = c.active ? el("span", { class: "badge ok" }, "active here")
    : el("span", { class: "badge warn" }, "not active here");
  return el("div", { class: "card controller", "data-controller": c.name },
    el("h3", {}, c.name, " ", el("span", { class: "muted" }, "(" + c.placement + ")"), " ", state),
    el("div", { class: "counts" },
      el("span", { class: "queued" }, "queued " + c.queued),
      el("span", {}, "delayed " + c.delayed),
      el("span", { class: "in-flight-count" }, "in flight " + c.in_flight),
      el("span", {}, "reconciles " + c.reconciles),
      el("span", {}, "failures " + c.failures),
      el("span", {}, "retries " + c.retries),
      el("span", { class: "muted" }, c.stuck_after_seconds === null ? "no stuck bound"
        : "stuck after " + seconds(c.stuck_after_seconds))),
    el("div", { class: "tables muted" }, "per-key tables: ",
      ...c.tables.map(([name, keys]) =>
        el("span", { class: "table", "data-table": name }, name.replaceAll("_", " ") + " " + keys))),
    el("div", { class: "keys-in-flight" }, inFlight(c)),
    c.hot_keys.length === 0 ? null : el("div", { class: "hot-keys" },
      el("h4", { class: "error" }, "Hot keys: reconciled again and again, with a write each time"),
      table(["key", "writes in the window", "woken by", "hot for", "spaced by"], c.hot_keys.map((h) =>
        el("tr", { class: "hot-key", "data-key": h.key },
          el("td", { class: "key" }, h.key), el("td", {}, h.writes.toFixed(1)),
          el("td", {}, h.woken_by), el("td", {}, seconds(h.hot_for_seconds)),
          el("td", {}, h.spacing_seconds === null ? "not spaced" : seconds(h.spacing_seconds)))), "")),
    el("h4", {}, "Last reconciles"), el("div", { class: "recent" }, reconciles(c.recent, "none yet")),
    el("h4", {}, "Last errors"), el("div", { class: "errors" }, reconciles(c.errors, "none")));
}

function informers(list) {
  return table(["informer", "synced", "objects", "revision", "lists", "relists", "watch restarts",
    "events", "behind", "last progress", "failing for"], list.map((i) =>
    el("tr", { class: "informer", "data-informer": i.name },
      el("td", { class: "key" }, i.name), el("td", {}, i.synced ? "yes" : "no"),
      el("td", {}, i.objects), el("td", {}, i.revision), el("td", {}, i.lists),
      el("td", {}, i.relists), el("td", {}, i.watch_restarts), el("td", {}, i.events_applied),
      el("td", { class: i.behind_for_seconds ? "lag error" : "lag" }, i.lag_revisions === null
        ? "not probed" : i.lag_revisions + " rev, for " + seconds(i.behind_for_seconds)),
      el("td", {}, i.last_progress_ago_seconds === null ? "never"
        : seconds(i.last_progress_ago_seconds) + " ago"),
      el("td", { class: i.failing_for_seconds === null ? "" : "error" },
        seconds(i.failing_for_seconds)))), "no informer");
}

function election(e) {
  if (e === null) return el("p", { class: "muted" }, "no leader election");
  return el("p", {}, el("span", { class: "key" }, e.name), ": ",
    e.leader ? "leading with token " + e.token : "standing by", " for ", seconds(e.for_seconds));
}

function shards(s) {
  if (s === null) return el("p", { class: "muted" }, "no sharding");
  return el("div", {},
    el("p", {}, "group ", el("span", { class: "key" }, s.group), ", member ",
      el("span", { class: "key" }, s.member), ", " + s.shards + " shards; members: ",
      s.members.join(", ")),
    el("p", {}, "assigned: " + (s.assigned.join(", ") || "none")),
    table(["owned shard", "token"], s.owned.map((o) =>
      el("tr", {}, el("td", {}, o.shard), el("td", {}, o.token))), "no shard owned"));
}

function problems(report) {
  const lines = [];
  if (!report.health.ok) lines.push(...report.health.text.split("\n"));
  if (!report.ready.ok) lines.push(report.ready.text);
  return lines.map((line) => el("li", {}, line));
}

function draw(report) {
  badge("health", "health", report.health);
  badge("ready", "ready", report.ready);
  document.getElementById("problems").replaceChildren(...problems(report));
  document.getElementById("controllers").replaceChildren(
    ...(report.controllers.length ? report.controllers.map(controllerCard)
      : [el("p", { class: "muted" }, "no controller")]));
  document.getElementById("informers").replaceChildren(informers(report.informers));
  document.getElementById("election").replaceChildren(election(report.election));
  document.getElementById("shards").replaceChildren(shards(report.shards));
}

async function refresh() {
  try {
    const response = await fetch("status.json", { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    draw(await response.json());
    generation += 1;
    lastOk = Date.now();
    document.body.dataset.generation = String(generation);
    document.body.classList.remove("stale");
    document.getElementById("updated").textContent = "live";
  } catch (error) {
    document.body.classList.add("stale");
    const since = lastOk === null ? "never updated" : "last updated " +
      seconds((Date.now() - lastOk) / 1000) + " ago";
    document.getElementById("updated").textContent = "disconnected (" + error.message + "), " + since;
  } finally {
    setTimeout(refresh, PERIOD_MS);
  }
}

refresh();
