/* One trial: its config, every report (curves of each metric and the table), its checkpoints. */
"use strict";
(function () {
  const { el, getJSON, getPages, union, poll, section, table, badge, update, setText, lineChart, link, number, time } = AF;
  const id = AF.id;
  poll(async function () {
    const [trial, history, kept] = await Promise.all([
      getJSON("trials/" + encodeURIComponent(id)),
      getPages("trials/" + encodeURIComponent(id) + "/metrics", (all, page) =>
        ({ ...page, names: union(all.names, page.names), metrics: all.metrics.concat(page.metrics) })),
      getJSON("trials/" + encodeURIComponent(id) + "/checkpoints"),
    ]);
    setText(document.getElementById("heading"), "Trial " + trial.id + " · " + (trial.name || ""));
    update(section("summary", null),
      el("p", {}, badge(trial.status), " · ", link("experiments/" + encodeURIComponent(trial.experiment_id), "experiment " + trial.experiment_id),
        " · " + (trial.iterations || 0) + " iterations · " + (trial.restarts || 0) + " restarts"),
      el("p", { class: "af-muted" }, "config: " + JSON.stringify(trial.config || {})),
      trial.error ? el("pre", { class: "af-tb" }, trial.error) : null);
    const rows = history.metrics || [];
    const names = (history.names || []).filter((n) => rows.some((r) => typeof r[n] === "number"));
    const charts = names.filter((n) => !["step", "training_iteration", "timestamp", "time_total_s", "time_this_iter_s", "trial_id", "date"].includes(n)).slice(0, 12);
    // rebuilt (a few small charts), put in the page only when they differ from what is there
    update(section("curves", "Metrics"), el("div", { class: "af-row" }, charts.map((n) => el("div", {},
      el("h3", {}, n),
      lineChart([{ name: n, points: rows.filter((r) => typeof r[n] === "number").map((r) => [r.training_iteration ?? r.step, r[n]]) }],
        { width: 420, height: 220, xlabel: "iteration", integerX: true })))));
    table(section("reports", "Reports"), [
      { label: "step", value: (r) => r.step, num: true },
      ...names.filter((n) => n !== "step").map((n) => ({ label: n, value: (r) => r[n], num: true })),
    ], rows.slice(-200), { sortable: true, cls: "reports", empty: "no reports yet" });
    table(section("checkpoints", "Checkpoints"), [
      { label: "step", value: (c) => c.step, num: true },
      { label: "uri", value: (c) => c.uri },
      { label: "metrics", value: (c) => Object.entries(c.metrics || {}).filter(([, v]) => typeof v !== "object")
        .map(([k, v]) => k + "=" + number(v)).join(", ") },
      { label: "saved", value: (c) => c.created_at, cell: (c) => time(c.created_at) },
    ], kept.checkpoints || [], { cls: "checkpoints", empty: "no checkpoints kept" });
    return trial.status === "running" || trial.status === "pending" || trial.status === "paused";
  }, 2500);
})();
