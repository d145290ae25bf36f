/* One registered model: its versions, newest first, with aliases, metrics, tags, lineage (links to the run,
 * the experiment and the trial that made each) and the serve deployments that serve each. */
"use strict";
(function () {
  const { el, getJSON, poll, content, table, time, link, list } = AF;
  const name = AF.id;

  function pairs(values) {
    return Object.entries(values || {}).map(([k, v]) => k + "=" + (typeof v === "number" ? Number(v.toPrecision(4)) : v)).join(", ");
  }

  function lineage(v) {
    const parts = [];
    if (v.run_id != null) parts.push(link("runs/" + encodeURIComponent(v.run_id), "run " + v.run_id + (v.stage ? " · " + v.stage : "")));
    if (v.experiment_id != null) parts.push(link("experiments/" + encodeURIComponent(v.experiment_id), "experiment " + v.experiment_id));
    if (v.trial_id != null) parts.push(link("trials/" + encodeURIComponent(v.trial_id), "trial " + v.trial_id));
    for (const [role, d] of Object.entries(v.datasets || {})) {
      parts.push(el("span", { title: (d.paths || []).join("\n") }, role + ": " + d.files + " files · " + d.fingerprint.slice(0, 8)));
    }
    if (v.code_version) parts.push("code " + v.code_version.slice(0, 10) + (v.code_version.endsWith("+dirty") ? "+dirty" : ""));
    if (!parts.length && v.source) parts.push(v.source);
    return el("span", {}, parts.map((p, i) => [i ? " · " : "", p]));
  }

  function servedBy(v) {
    return el("span", {}, (v.served_by || []).map((d, i) =>
      [i ? ", " : "", link("deployments", d.app + "/" + d.deployment)]));
  }

  poll(async function () {
    const found = await getJSON("models/" + encodeURIComponent(name));
    table(content(), [
      { label: "version", value: (v) => v.version, num: true },
      { label: "aliases", value: (v) => (v.aliases || []).join(", ") },
      { label: "metrics", value: (v) => pairs(v.metrics) },
      { label: "tags", value: (v) => pairs(v.tags) },
      { label: "served by", value: (v) => (v.served_by || []).length, cell: servedBy },
      { label: "lineage", value: (v) => v.run_id || v.trial_id || 0, cell: lineage },
      { label: "description", value: (v) => v.description || "" },
      { label: "registered", value: (v) => v.created_at, cell: (v) => time(v.created_at) },
    ], list(found, "versions"), { sortable: true, cls: "model-versions", key: (v) => v.version, empty: "no versions" });
    return true;
  }, 5000);
})();
