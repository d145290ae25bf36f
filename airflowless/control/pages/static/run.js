/* One run: its stages as a graph coloured by state (live while the run is), a table of each
 * stage's attempts, duration, cache hit, error and traceback, and each stage's log (every attempt,
 * followed while it grows); for a run the service started, its driver's log too. */
"use strict";
(function () {
  const { el, svg, getJSON, request, poll, section, table, badge, duration, time, update, setText, actionButton, link } = AF;
  const id = AF.id;

  /* The log shown: node (null: the driver's), the attempt asked for (pinned; null: the latest, followed to
   * a retry's new attempt), what was read so far. */
  let shown = null;

  function openLog(node, attempt) {
    shown = { node, pinned: attempt || null, attempt: null, attempts: 0, offset: 0, text: "", done: false };
    drawLog();
    readLog();
  }

  async function readLog() {
    const reading = shown;
    if (!reading) return;
    const path = "runs/" + encodeURIComponent(id) + "/logs" + (reading.node === null ? "" : "/" + encodeURIComponent(reading.node));
    try {
      for (let pages = 0; pages < 40; pages++) { // a long log comes in pages; the rest at the next read
        const page = await request("GET", path + "?offset=" + reading.offset + (reading.pinned ? "&attempt=" + reading.pinned : ""),
          undefined, false);
        if (shown !== reading) return; // another log was opened meanwhile
        if (!reading.pinned && reading.attempt !== null && page.attempt !== reading.attempt) {
          Object.assign(reading, { attempt: page.attempt, text: "", offset: 0 }); // a retry began: its log from the start
          continue;
        }
        Object.assign(reading, { attempt: page.attempt, attempts: page.attempts, done: page.done,
          text: reading.text + page.text, offset: page.next_offset });
        if (!page.text) break;
      }
      reading.error = null;
    } catch (error) {
      reading.error = error.status === 401 ? error.message + " (enter the token at the top right to read logs)" : error.message;
      reading.done = true;
    }
    if (shown !== reading) return;
    drawLog();
    if (!reading.done) setTimeout(() => { if (shown === reading) readLog(); }, 1000);
  }

  function drawLog() {
    const holder = section("log", null);
    if (!shown) { holder.replaceChildren(); return; }
    const what = shown.node === null ? "the driver" : shown.node;
    const attempts = [];
    for (let n = 1; n <= shown.attempts; n++) {
      attempts.push(n === shown.attempt ? el("b", {}, " " + n) : [" ", el("a", { href: "#log", "data-attempt": n, onclick: (event) => {
        event.preventDefault();
        openLog(shown.node, n);
      } }, String(n))]);
    }
    holder.replaceChildren(el("h2", { id: "log" }, "Log of " + what),
      el("p", { class: "af-muted" }, shown.attempts > 1 ? ["attempt", ...attempts, " of " + shown.attempts] :
        shown.attempt ? "attempt " + shown.attempt : "", shown.done ? "" : " · following",
        " ", el("button", { type: "button", class: "af-action", onclick: () => { shown = null; drawLog(); } }, "close")),
      shown.error ? el("p", { class: "af-error" }, shown.error) : null,
      el("pre", { class: "af-tb af-log", "data-node": shown.node === null ? "" : shown.node },
        shown.text || (shown.done ? "(it printed and logged nothing)" : "(nothing yet)")));
  }

  function layers(stages) {
    const byNode = new Map(stages.map((s) => [s.node, s]));
    const depth = new Map();
    function depthOf(node, seen) {
      if (depth.has(node)) return depth.get(node);
      if (seen.has(node)) return 0;
      seen.add(node);
      const ups = (byNode.get(node).upstream || []).filter((u) => byNode.has(u));
      const d = ups.length ? 1 + Math.max(...ups.map((u) => depthOf(u, seen))) : 0;
      depth.set(node, d);
      return d;
    }
    stages.forEach((s) => depthOf(s.node, new Set()));
    const columns = [];
    stages.forEach((s) => { const d = depth.get(s.node); (columns[d] = columns[d] || []).push(s); });
    return columns;
  }

  /* A mapped stage's items (score[0], score[1]...) are drawn as the stage's one node, which says how many
   * items are in each state; its edges come from what it and its items read. */
  function folded(stages) {
    const byNode = new Map(stages.map((s) => [s.node, s]));
    const readsOf = new Map(); // a stage -> the set of what it reads (asked once)
    const reads = (node) => readsOf.get(node) || readsOf.set(node, new Set(byNode.get(node).upstream || [])).get(node);
    const itemsOf = new Map();
    const shown = [];
    for (const s of stages) {
      const m = /^(.*)\[\d+\]$/.exec(s.node);
      if (m && byNode.has(m[1]) && reads(m[1]).has(s.node)) { // an item of its mapped stage (not a stage named so)
        if (!itemsOf.has(m[1])) itemsOf.set(m[1], []);
        itemsOf.get(m[1]).push(s);
      } else shown.push(s);
    }
    return shown.map((s) => {
      const items = itemsOf.get(s.node);
      if (!items) return s;
      const counts = {};
      const own = new Set(items.map((i) => i.node));
      const upstream = new Set((s.upstream || []).filter((u) => !own.has(u)));
      items.forEach((i) => {
        counts[i.status] = (counts[i.status] || 0) + 1;
        (i.upstream || []).forEach((u) => upstream.add(u));
      });
      const status = s.status === "pending" && items.some((i) => i.status !== "pending") ? "running" : s.status;
      const said = Object.entries(counts).map(([how, n]) => n + " " + how).join(", ");
      return { ...s, status, upstream: [...upstream], items: items.length, said };
    });
  }

  function graph(recorded) {
    const W = 170, H = 34, GX = 60, GY = 18, PAD = 10;
    const stages = folded(recorded);
    const columns = layers(stages);
    const tallest = Math.max(1, ...columns.map((c) => (c || []).length));
    const width = PAD * 2 + columns.length * W + (columns.length - 1) * GX;
    const height = PAD * 2 + tallest * H + (tallest - 1) * GY;
    const where = new Map();
    columns.forEach((column, ci) => (column || []).forEach((stage, ri) => {
      const offset = ((tallest - column.length) * (H + GY)) / 2;
      where.set(stage.node, { x: PAD + ci * (W + GX), y: PAD + offset + ri * (H + GY) });
    }));
    const chart = svg("svg", { class: "af-graph", width: width, height: height, viewBox: `0 0 ${width} ${height}` },
      svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7,
        orient: "auto-start-reverse" }, svg("path", { d: "M0 0 L10 5 L0 10 z", fill: "#888" }))));
    stages.forEach((stage) => (stage.upstream || []).forEach((up) => {
      const a = where.get(up), b = where.get(stage.node);
      if (!a || !b) return;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mid = (x1 + x2) / 2;
      chart.appendChild(svg("path", { class: "edge", "marker-end": "url(#arrow)", d: `M${x1} ${y1} C${mid} ${y1} ${mid} ${y2} ${x2} ${y2}` }));
    }));
    stages.forEach((stage) => {
      const p = where.get(stage.node);
      const name = stage.items != null ? stage.node + " ×" + stage.items : stage.node;
      const label = name.length > 24 ? name.slice(0, 23) + "…" : name;
      const mapped = stage.items != null ? { "data-items": stage.items, "data-counts": stage.said } : {};
      chart.appendChild(svg("g", { class: "stage", "data-node": stage.node, "data-status": stage.status, ...mapped },
        svg("title", {}, stage.node + ": " + stage.status + (stage.cache_hit ? " (cache hit)" : "") +
          (stage.items != null ? "; items: " + (stage.said || "none") : "")),
        svg("rect", { class: "node s-" + String(stage.status).replace(/[^a-z_]/gi, ""), x: p.x, y: p.y, width: W, height: H, rx: 5 }),
        stage.items != null
          ? [svg("text", { x: p.x + W / 2, y: p.y + H / 2 - 7 }, label),
             svg("text", { class: "items", x: p.x + W / 2, y: p.y + H / 2 + 8 }, stage.said || "no items")]
          : svg("text", { x: p.x + W / 2, y: p.y + H / 2 }, label)));
    });
    return chart;
  }

  let lastRun = null; // the run at the last refresh: the same object again (a 304) -> nothing to redraw
  poll(async function () {
    const run = await getJSON("runs/" + encodeURIComponent(id));
    if (run === lastRun) return run.status === "running" || run.status === "queued";
    lastRun = run;
    setText(document.getElementById("heading"), "Run " + run.id + " · " + run.pipeline);
    const summary = section("summary", null);
    const cancel = run.status === "running" || run.status === "queued" ? actionButton("cancel run", "runs/" + encodeURIComponent(run.id) + "/cancel",
      "Cancel run " + run.id + "?") : null;
    update(summary, el("p", {}, badge(run.status), " ", run.module, run.started_at || !run.trigger ? " · started " : " · queued ", time(run.started_at || run.created_at),
      run.duration_s != null ? " · took " + duration(run.duration_s) : "", " ", cancel),
      run.trigger ? el("p", { class: "af-muted" }, "started by the service: " + run.trigger +
        (run.trigger_detail ? " (" + run.trigger_detail + ")" : "") +
        (run.upstream_run != null ? " after run " + run.upstream_run : "") +
        (run.interval_end ? " for " + run.interval_start + " – " + run.interval_end : "") +
        (run.backfill_id != null ? " (backfill " + run.backfill_id + ")" : "") +
        (run.status === "queued" && run.queue_reason ? " · queued: " + run.queue_reason : "")) : null,
      run.error ? el("pre", { class: "af-tb" }, run.error) : null,
      run.driver_log_uri ? el("p", {}, el("button", { type: "button", class: "af-action", "data-log": "driver",
        onclick: () => openLog(null) }, "driver log")) : null,
      Object.keys(run.params || {}).length ? el("p", { class: "af-muted" }, "params: " + JSON.stringify(run.params)) : null);
    const notes = run.notifications || [];
    update(section("notifications", null), notes.length ? [el("h2", {}, "Notifications"),
      el("ul", {}, notes.map((n) => el("li", {}, n.event + " → " + n.channel + ": " + n.status +
        (n.error ? " (" + n.error + ")" : "") + (n.attempts > 1 ? ", " + n.attempts + " attempts" : ""))))] : []);
    const experiments = run.experiments || []; // what its stages started (a Tuner, a Trainer's fit)
    update(section("experiments", null), experiments.length ? [el("h2", {}, "Experiments"),
      el("ul", { class: "af-experiments" }, experiments.map((e) => el("li", {},
        link("experiments/" + encodeURIComponent(e.id), "experiment " + e.id + " · " + e.name), " ", badge(e.status),
        " " + e.kind + " in stage " + e.stage)))] : []);
    const stages = run.stages || [];
    const states = [...new Set(stages.map((s) => s.status))];
    update(section("graph", "Stages"), stages.length ? [graph(stages), el("p", { class: "af-legend" }, states.map((s) => [badge(s), " "]))]
      : el("p", { class: "af-muted" }, "no stages recorded yet"));
    table(section("stages", "Stage runs"), [
      { label: "stage", value: (s) => s.node },
      { label: "status", value: (s) => s.status, cell: (s) => badge(s.status) },
      { label: "attempts", value: (s) => s.attempts, num: true },
      { label: "duration", value: (s) => s.duration_s, cell: (s) => duration(s.duration_s) },
      { label: "cache hit", value: (s) => (s.cache_hit ? "yes" : "no"),
        cell: (s) => (s.cache_hit ? (s.reused_from_run != null ? "yes (run " + s.reused_from_run + ")" : "yes") : "no") },
      { label: "worker", value: (s) => s.worker || "" },
      { label: "output", value: (s) => s.output_summary || "" },
      { label: "error", value: (s) => s.error || "",
        cell: (s) => (s.error ? el("div", {}, s.error, s.traceback ? el("details", {}, el("summary", {}, "traceback"),
          el("pre", { class: "af-tb" }, s.traceback)) : null) : "") },
      { label: "log", value: () => "", cell: (s) => (s.log_uri ? el("button", { type: "button", class: "af-action",
        "data-log": s.node, onclick: () => openLog(s.node) }, "log") : "") },
    ], stages, { sortable: true, cls: "stages", key: (s) => s.node });
    return run.status === "running" || run.status === "queued";
  }, 1500);
})();
