/* The index: the latest runs and experiments, and where the live views are. */
"use strict";
(function () {
  const { el, getJSON, poll, section, table, badge, duration, time, link, list } = AF;
  poll(async function () {
    const [runs, experiments] = await Promise.all([getJSON("runs?limit=10"), getJSON("experiments?limit=10")]);
    table(section("latest-runs", "Latest runs"), [
      { label: "run", value: (r) => r.id, cell: (r) => link("runs/" + encodeURIComponent(r.id), "#" + r.id) },
      { label: "pipeline", value: (r) => r.pipeline },
      { label: "status", value: (r) => r.status, cell: (r) => badge(r.status) },
      { label: "started", value: (r) => time(r.created_at) },
      { label: "duration", value: (r) => duration(r.duration_s) },
    ], list(runs, "runs"), { empty: "no runs recorded yet" });
    table(section("latest-experiments", "Latest experiments"), [
      { label: "experiment", value: (e) => e.id, cell: (e) => link("experiments/" + encodeURIComponent(e.id), e.name || "#" + e.id) },
      { label: "kind", value: (e) => e.kind },
      { label: "status", value: (e) => e.status, cell: (e) => badge(e.status) },
      { label: "trials", value: (e) => Object.entries(e.trials || {}).map(([k, v]) => v + " " + k).join(", ") },
      { label: "started", value: (e) => time(e.created_at) },
    ], list(experiments, "experiments"), { empty: "no experiments recorded yet" });
    const live = section("live", "Live views");
    AF.update(live, el("p", {}, link("data", "Data"), " — the Data executor's operators while a dataset streams. ",
      link("serve", "Serve"), " — deployments, replicas, requests and latency."));
    return true;
  }, 5000);
})();
