/* The experiments: Trainer fits and Tuner searches, newest first, with their trials by state. */
"use strict";
(function () {
  const { getJSON, poll, content, table, badge, time, link, list } = AF;
  poll(async function () {
    const experiments = list(await getJSON("experiments?limit=200"), "experiments");
    table(content(), [
      { label: "id", value: (e) => e.id, cell: (e) => link("experiments/" + encodeURIComponent(e.id), "#" + e.id), num: true },
      { label: "name", value: (e) => e.name, cell: (e) => link("experiments/" + encodeURIComponent(e.id), e.name || "") },
      { label: "kind", value: (e) => e.kind },
      { label: "status", value: (e) => e.status, cell: (e) => badge(e.status) },
      { label: "metric", value: (e) => (e.metric ? e.metric + (e.mode ? " (" + e.mode + ")" : "") : "") },
      { label: "trials", value: (e) => Object.values(e.trials || {}).reduce((a, b) => a + b, 0),
        cell: (e) => Object.entries(e.trials || {}).map(([k, v]) => v + " " + k).join(", ") },
      { label: "started", value: (e) => e.created_at, cell: (e) => time(e.created_at) },
    ], experiments, { sortable: true, cls: "experiments", key: (e) => e.id, empty: "no experiments recorded yet" });
    return true;
  }, 3000);
})();
