/* One experiment: a sortable table of its trials (config, status, last metrics) and, beside it,
 * the learning curves of a chosen metric for every trial, the best highlighted; paused, errored
 * and early-ended trials are drawn dashed. */
"use strict";
(function () {
  const { el, getJSON, getPages, union, poll, section, table, badge, replace, legend, link, number, actionButton } = AF;
  const id = AF.id;
  const INACTIVE = new Set(["paused", "errored", "error", "stopped", "completed_with_errors"]);
  const HIDDEN = new Set(["step", "training_iteration", "timestamp", "done", "trial_id", "date", "time_this_iter_s", "time_total_s"]);
  let chosen = null;       // the metric the curves show
  const cache = new Map(); // trial id -> {iterations, status, history: [{step, metric: value...}]}
  const BATCH = 200;       // trial ids per request (beyond that, one request for every trial)

  function merge(all, page) { // two pages of reports by trial: a trial may go on from one to the next
    const byTrial = new Map(all.trials.map((t) => [t.trial_id, t.metrics]));
    page.trials.forEach((t) => byTrial.set(t.trial_id, (byTrial.get(t.trial_id) || []).concat(t.metrics)));
    return { ...page, names: union(all.names, page.names),
             trials: [...byTrial].map(([trialId, metrics]) => ({ trial_id: trialId, metrics: metrics })) };
  }

  async function fetchHistories(experimentId, trials) {
    const stale = trials.filter((t) => {
      const known = cache.get(t.id);
      return !known || known.iterations !== t.iterations || known.status !== t.status;
    });
    if (!stale.length) return true;
    const only = stale.length === trials.length || stale.length > BATCH ? ""
      : "?" + stale.map((t) => "trial=" + encodeURIComponent(t.id)).join("&");
    const answer = await getPages("experiments/" + encodeURIComponent(experimentId) + "/metrics" + only, merge)
      .catch(() => null);
    if (answer === null) return false; // keep what was drawn; the next refresh asks again
    const byId = new Map(trials.map((t) => [t.id, t]));
    (answer.trials || []).forEach((entry) => {
      const t = byId.get(entry.trial_id);
      if (t) cache.set(t.id, { iterations: t.iterations, status: t.status, history: entry.metrics || [] });
    });
    return true;
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

  let lastAnswer = null;   // the experiment at the last refresh: the same object again (a 304) -> nothing to do
  let lastLive = true;
  let pending = false;     // a metrics request failed: ask again even if the experiment did not move
  const pointsOf = new Map(); // trial id -> {history, metric, points}: the same array while unchanged
  let select = null, chartHolder = null, legendHolder = null, legendSig = null;
  let view = null;         // what the last draw used, for the metric selector

  function points(trial, metric) {
    const history = (cache.get(trial.id) || { history: [] }).history;
    const known = pointsOf.get(trial.id);
    if (known && known.history === history && known.metric === metric) return known.points;
    const pts = history.filter((row) => typeof row[metric] === "number")
      .map((row) => [row.training_iteration ?? row.step, row[metric]]);
    pointsOf.set(trial.id, { history, metric, points: pts });
    return pts;
  }

  function drawCurves() {
    const { experiment, trials, maxIterations } = view;
    const bestShown = best(experiment, trials, experiment.metric || chosen);
    const series = trials.map((t) => ({
      key: t.id,
      name: t.name || "trial " + t.id,
      points: points(t, chosen),
      best: t.id === bestShown,
      inactive: !!shape(t, maxIterations),
    }));
    AF.liveChart(chartHolder, series, { xlabel: "iteration", ylabel: chosen || "", empty: "no metrics reported yet", integerX: true });
    const sig = JSON.stringify(series.map((s) => [s.name, s.best]));
    if (sig !== legendSig) { legendSig = sig; replace(legendHolder, legend(series)); }
  }

  function drawSelect(names) {
    const current = [...select.options].map((o) => o.value);
    if (current.length !== names.length || current.some((n, i) => n !== names[i])) {
      select.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    }
    if (chosen !== null && select.value !== chosen) select.value = chosen;
  }

  poll(async function () {
    const experiment = await getJSON("experiments/" + encodeURIComponent(id)); // the same object after a 304
    if (experiment === lastAnswer && !pending) return lastLive; // nothing moved: touch nothing
    lastAnswer = experiment;
    const trials = experiment.trials || [];
    AF.setText(document.getElementById("heading"), "Experiment " + experiment.id + " · " + (experiment.name || ""));
    const running = experiment.status === "running";
    AF.update(section("summary", null), el("p", {}, badge(experiment.status), " ", experiment.kind || "",
      experiment.metric ? " · metric " + experiment.metric + (experiment.mode ? " (" + experiment.mode + ")" : "") : "",
      " · " + trials.length + " trials ",
      running ? actionButton("stop experiment", "experiments/" + encodeURIComponent(experiment.id) + "/stop",
        "Stop experiment " + experiment.id + "?") : null),
      experiment.run_id != null ? el("p", { class: "af-muted af-started-by" }, "started by ",
        link("runs/" + encodeURIComponent(experiment.run_id), "run " + experiment.run_id), ", stage " + experiment.stage) : null,
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
      // the metric being optimised first, where it is seen without scrolling; then the config, the rest
      ...metricKeys.filter((k) => k === scoreMetric).map((k) => ({ label: k,
        value: (t) => (t.last_metrics || {})[k], cell: (t) => number((t.last_metrics || {})[k]), num: true })),
      { label: "iter", value: (t) => t.iterations, num: true },
      { label: "restarts", value: (t) => t.restarts, num: true },
      ...configKeys.map((k) => ({ label: k, value: (t) => (t.config || {})[k], cell: (t) => number((t.config || {})[k]) })),
      ...metricKeys.filter((k) => k !== scoreMetric).map((k) => ({ label: k, value: (t) => (t.last_metrics || {})[k], num: true })),
    ], trials, {
      sortable: true, cls: "trials", key: (t) => t.id,
      rowClass: (t) => [t.id === bestId ? "best" : "", shape(t, maxIterations) ? "inactive" : ""].join(" ").trim() || null,
    });

    // Curves: the reports of the trials whose iteration count or status moved since the last
    // refresh, all in one request (so an open page asks the scheduler for little while a search
    // runs); only those trials' paths are redrawn, all of them only when the axes' range moves.
    pending = !(await fetchHistories(experiment.id, trials));
    const names = [...new Set(trials.flatMap((t) => (cache.get(t.id) || { history: [] }).history
      .flatMap((r) => Object.keys(r))))].filter((n) => !HIDDEN.has(n)).sort();
    if (chosen === null || !names.includes(chosen)) {
      chosen = experiment.metric && names.includes(experiment.metric) ? experiment.metric : names[0] || null;
    }
    if (!select) {
      select = el("select", { id: "metric", onchange: (event) => { chosen = event.target.value; drawCurves(); } });
      chartHolder = el("div", { class: "af-chart-holder" });
      legendHolder = el("div");
      replace(section("curves", "Learning curves", row), el("p", {}, el("label", {}, "metric ", select)),
        chartHolder, legendHolder);
    }
    drawSelect(names);
    view = { experiment, trials, maxIterations };
    drawCurves();
    lastLive = running || trials.some((t) => t.status === "running" || t.status === "pending");
    return lastLive;
  }, 2500);
})();
