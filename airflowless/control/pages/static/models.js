/* The model registry: each registered model, its newest version, how many, and its aliases. */
"use strict";
(function () {
  const { getJSON, poll, content, table, time, link, list } = AF;
  poll(async function () {
    const models = list(await getJSON("models"), "models");
    table(content(), [
      { label: "name", value: (m) => m.name, cell: (m) => link("models/" + encodeURIComponent(m.name), m.name) },
      { label: "latest", value: (m) => m.latest_version, num: true },
      { label: "versions", value: (m) => m.versions, num: true },
      { label: "aliases", value: (m) => Object.entries(m.aliases || {}).map(([a, v]) => a + " → " + v).join(", ") },
      { label: "updated", value: (m) => m.updated_at, cell: (m) => time(m.updated_at) },
    ], models, { sortable: true, cls: "models", key: (m) => m.name, empty: "no models registered yet" });
    return true;
  }, 5000);
})();
