/* The runs: newest first, live while any runs; filtered by pipeline and status; two ticked runs compared
 * side by side (their parameters, and each stage's state and output). */
"use strict";
(function () {
  const { el, getJSON, poll, content, section, table, badge, duration, time, link, list, update } = AF;
  const filters = { pipeline: "", status: "" };
  const picked = new Set(); // run ids ticked for the comparison (two at most: the oldest tick goes)
  let latest = [];

  function params(run) {
    return Object.entries(run.params || {}).map(([k, v]) => k + "=" + (typeof v === "string" ? v : JSON.stringify(v))).join(", ");
  }

  function choice(name, values) {
    const select = el("select", { id: "filter-" + name, onchange: (event) => { filters[name] = event.target.value; draw(); } },
      el("option", { value: "" }, "every " + name), values.map((v) => el("option", { value: v }, v)));
    select.value = values.includes(filters[name]) ? filters[name] : "";
    return el("label", {}, name + " ", select);
  }

  function tick(run) {
    const box = el("input", { type: "checkbox", class: "af-pick", "data-run": String(run.id),
      onchange: (event) => {
        if (event.target.checked) picked.add(run.id); else picked.delete(run.id);
        while (picked.size > 2) picked.delete(picked.values().next().value);
        document.querySelectorAll("input.af-pick").forEach((b) => { b.checked = picked.has(Number(b.dataset.run)); });
        compare();
      } });
    box.checked = picked.has(run.id);
    return box;
  }

  async function compare() {
    const holder = section("compare", null);
    if (picked.size !== 2) {
      update(holder, el("p", { class: "af-muted" }, "tick two runs to compare their parameters and outputs"));
      return;
    }
    const [a, b] = await Promise.all([...picked].sort((x, y) => x - y).map((id) => getJSON("runs/" + encodeURIComponent(id))));
    const keys = [...new Set([...Object.keys(a.params || {}), ...Object.keys(b.params || {})])].sort();
    const shown = (v) => (v === undefined ? "—" : typeof v === "string" ? v : JSON.stringify(v));
    const rows = keys.map((k) => ({ what: k, a: shown((a.params || {})[k]), b: shown((b.params || {})[k]) }));
    const stages = [...new Set([...(a.stages || []), ...(b.stages || [])].map((s) => s.node))];
    const of = (run, node) => (run.stages || []).find((s) => s.node === node);
    const said = (s) => (s ? s.status + (s.output_summary ? ": " + s.output_summary : s.error ? ": " + s.error : "") : "—");
    rows.push(...stages.map((node) => ({ what: "stage " + node, a: said(of(a, node)), b: said(of(b, node)) })));
    rows.unshift({ what: "status", a: a.status, b: b.status },
      { what: "duration", a: duration(a.duration_s), b: duration(b.duration_s) });
    update(holder, el("h2", {}, "Run " + a.id + " and run " + b.id),
      el("table", { class: "af compare" }, el("thead", {}, el("tr", {}, el("th", {}, ""),
        el("th", {}, link("runs/" + a.id, "run " + a.id)), el("th", {}, link("runs/" + b.id, "run " + b.id)))),
      el("tbody", {}, rows.map((r) => el("tr", { class: r.a === r.b ? null : "differs" },
        el("td", {}, r.what), el("td", {}, r.a), el("td", {}, r.b))))));
  }

  function draw() {
    const runs = latest.filter((r) => (!filters.pipeline || r.pipeline === filters.pipeline) &&
      (!filters.status || r.status === filters.status));
    update(section("filters", null), el("p", { class: "af-filters" },
      choice("pipeline", [...new Set(latest.map((r) => r.pipeline))].sort()), " ",
      choice("status", [...new Set(latest.map((r) => r.status))].sort()),
      " · " + runs.length + " of " + latest.length + " runs"));
    table(section("runs", null), [
      { label: "", value: (r) => (picked.has(r.id) ? 1 : 0), cell: tick },
      { label: "run", value: (r) => r.id, cell: (r) => link("runs/" + encodeURIComponent(r.id), "#" + r.id), num: true },
      { label: "pipeline", value: (r) => r.pipeline },
      { label: "status", value: (r) => r.status, cell: (r) => badge(r.status) },
      { label: "params", value: params },
      { label: "started", value: (r) => r.started_at || r.created_at, cell: (r) => time(r.started_at || r.created_at) },
      { label: "duration", value: (r) => r.duration_s, cell: (r) => duration(r.duration_s) },
      { label: "error", value: (r) => r.error || "" },
      { label: "module", value: (r) => r.module },
    ], runs, { sortable: true, cls: "runs", key: (r) => r.id, empty: latest.length ? "no run matches" : "no runs recorded yet" });
  }

  poll(async function () {
    latest = list(await getJSON("runs?limit=200"), "runs");
    draw();
    if (!document.getElementById("compare")) compare();
    return true;
  }, 3000);
})();
