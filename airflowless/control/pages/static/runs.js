/* The runs: newest first, live while any runs. */
"use strict";
(function () {
  const { getJSON, poll, content, table, badge, duration, time, link, list } = AF;
  poll(async function () {
    const runs = list(await getJSON("runs?limit=200"), "runs");
    table(content(), [
      { label: "run", value: (r) => r.id, cell: (r) => link("runs/" + encodeURIComponent(r.id), "#" + r.id), num: true },
      { label: "pipeline", value: (r) => r.pipeline },
      { label: "module", value: (r) => r.module },
      { label: "status", value: (r) => r.status, cell: (r) => badge(r.status) },
      { label: "started", value: (r) => r.started_at || r.created_at, cell: (r) => time(r.started_at || r.created_at) },
      { label: "duration", value: (r) => r.duration_s, cell: (r) => duration(r.duration_s) },
      { label: "error", value: (r) => r.error || "" },
    ], runs, { sortable: true, cls: "runs", key: (r) => r.id, empty: "no runs recorded yet" });
    return true;
  }, 3000);
})();
