/* One experiment: a sortable table of its trials (config, status, last metrics) and, beside it,
 * the learning curves of a chosen metric for every trial, the best highlighted; paused, errored
 * and early-ended trials are drawn dashed. */
"use strict";
(function () {
  const { el, getJSON, poll, section, table, badge, replace, lineChart, legend, link, number, actionButton } = AF;
  const id = AF.id;
  const INACTIVE = new Set(["paused", "errored", "error", "stopped", "completed_with_errors"]);
  const HIDDEN = new Set(["step", "training_iteration", "timestamp", "done"]);
  let chosen = null;       // the metric the curves show
  let lastRender = null;   // redraw the curves when the selector changes
  const cache = new Map(); // trial id -> {iterations, status, history: [{step, metric: value...}]}
  const BATCH = 200;       // trial ids per request (beyond that, one request for every trial)

  async function fetchHistories(experimentId, trials) {
    const stale = trials.filter((t) => {
      const known = cache.get(t.id);
      return !known || known.iterations !== t.iterations || known.status !== t.status;
    });
    if (!stale.length) return;
    const only = stale.length === trials.length || stale.length > BATCH ? ""
      : "?" + stale.map((t) => "trial=" + encodeURIComponent(t.id)).join("&");
    const answer = await getJSON("experiments/" + encodeURIComponent(experimentId) + "/metrics" + only).catch(() => null);
    if (answer === null) return; // keep what was drawn; the next refresh asks again
    const byId = new Map(trials.map((t) => [t.id, t]));
    (answer.trials || []).forEach((entry) => {
      const t = byId.get(entry.trial_id);
      if (t) cache.set(t.id, { iterations: t.iterations, status: t.status, history: entry.metrics || [] });
    });
  }

  function best(experiment, trials, metric) {
    const mode = experiment.mode === "max" ? 1 : experiment.mode === "min" ? -1 : 0;
    if (!mode || !metric) return null;
    let winner = null;
    trials.forEach((t) => {
      const v = (t.last_metrics || {})[metric];
      if (typeof v === "number" && isFinite(v) && (winner === null || v * mode > winner.v * mode)) winner = { id: t.id, v: v };
    });
    return winner && winner.id;
  }

  function shape(trial, maxIterations) {
    if (INACTIVE.has(trial.status)) return trial.status;
    if (trial.status === "completed" && maxIterations && trial.iterations < maxIterations) return "ended early";
    return null;
  }

  poll(async function () {
    const experiment = await getJSON("experiments/" + encodeURIComponent(id));
    const trials = experiment.trials || [];
    document.getElementById("heading").textContent = "Experiment " + experiment.id + " · " + (experiment.name || "");
    const running = experiment.status === "running";
    replace(section("summary", null), el("p", {}, badge(experiment.status), " ", experiment.kind || "",
      experiment.metric ? " · metric " + experiment.metric + (experiment.mode ? " (" + experiment.mode + ")" : "") : "",
      " · " + trials.length + " trials ",
      running ? actionButton("stop experiment", "experiments/" + encodeURIComponent(experiment.id) + "/stop",
        "Stop experiment " + experiment.id + "?") : null),
      experiment.error ? el("pre", { class: "af-tb" }, experiment.error) : null);

    const configKeys = [...new Set(trials.flatMap((t) => Object.keys(t.config || {})))].sort();
    const metricKeys = [...new Set(trials.flatMap((t) => Object.entries(t.last_metrics || {})
      .filter(([, v]) => typeof v === "number").map(([k]) => k)))].sort();
    const maxIterations = Math.max(0, ...trials.map((t) => t.iterations || 0));
    const scoreMetric = experiment.metric || chosen;
    const bestId = best(experiment, trials, scoreMetric);

    let row = document.getElementById("trials-and-curves");
    if (!row) { row = el("div", { class: "af-row", id: "trials-and-curves" }); AF.content().appendChild(row); }
    table(section("trials", "Trials", row), [
      { label: "trial", value: (t) => t.id, cell: (t) => link("trials/" + encodeURIComponent(t.id), t.name || "#" + t.id) },
      { label: "status", value: (t) => t.status, cell: (t) => {
        const note = shape(t, maxIterations);
        return el("span", {}, badge(t.status), note && note !== t.status ? " " + note : "",
          t.id === bestId ? " ★ best" : "",
          t.status === "running" ? [" ", actionButton("stop", "trials/" + encodeURIComponent(t.id) + "/stop")] : null);
      } },
      { label: "iter", value: (t) => t.iterations, num: true },
      { label: "restarts", value: (t) => t.restarts, num: true },
      ...configKeys.map((k) => ({ label: k, value: (t) => (t.config || {})[k], cell: (t) => number((t.config || {})[k]) })),
      ...metricKeys.map((k) => ({ label: k, value: (t) => (t.last_metrics || {})[k], num: true })),
    ], trials, {
      sortable: true, cls: "trials",
      rowClass: (t) => [t.id === bestId ? "best" : "", shape(t, maxIterations) ? "inactive" : ""].join(" ").trim() || null,
    });

    // Curves: the reports of the trials whose iteration count or status moved since the last
    // refresh, all in one request (so an open page asks the scheduler for little while a search runs).
    await fetchHistories(experiment.id, trials);
    const histories = trials.map((t) => (cache.get(t.id) || { history: [] }).history);
    const names = [...new Set(histories.flatMap((rows) => rows.flatMap((row) => Object.keys(row))))]
      .filter((n) => !HIDDEN.has(n)).sort();
    if (chosen === null || !names.includes(chosen)) {
      chosen = experiment.metric && names.includes(experiment.metric) ? experiment.metric : names[0] || null;
    }
    lastRender = function () {
      const bestShown = best(experiment, trials, experiment.metric || chosen);
      const series = trials.map((t, i) => ({
        name: t.name || "trial " + t.id,
        points: histories[i].filter((row) => typeof row[chosen] === "number")
          .map((row) => [row.training_iteration ?? row.step, row[chosen]]),
        best: t.id === bestShown,
        inactive: !!shape(t, maxIterations),
      }));
      const select = el("select", { id: "metric", onchange: (event) => { chosen = event.target.value; lastRender(); } },
        names.map((n) => { const o = el("option", { value: n }, n); if (n === chosen) o.selected = true; return o; }));
      replace(section("curves", "Learning curves", row), el("p", {}, el("label", {}, "metric ", select)),
        lineChart(series, { xlabel: "iteration", ylabel: chosen || "", empty: "no metrics reported yet" }), legend(series));
    };
    lastRender();
    return running || trials.some((t) => t.status === "running" || t.status === "pending");
  }, 2500);
})();
