/* Serve: the deployments running now (status, replicas against the target, autoscaling bounds,
 * queue, requests/s, p50/p99 over the last second) with their replicas, and, from the record,
 * every deployment made. */
"use strict";
(function () {
  const { el, getJSON, poll, section, table, badge, time, list, number, replace, setText, arrange } = AF;
  let parts = null; // the live section's elements, made once
  const ms = (v) => (v === null || v === undefined ? "" : number(Math.round(v * 100) / 100) + " ms");

  const wanted = new Map(); // "app/deployment" -> the replica count typed in, kept across refreshes

  /* A replica count and a button posting it (the action needs the token). */
  function scaler(d) {
    const key = d.app + "/" + d.deployment;
    // the value is set as a property, not an attribute: typing does not change the cell's signature,
    // so a refresh keeps this input (and its focus) until the target itself changes
    const input = el("input", { type: "number", min: 0, max: 1000, class: "af-replicas", "data-deployment": key,
      "data-target": d.target_replicas, oninput: (event) => wanted.set(key, event.target.value) });
    input.value = wanted.get(key) ?? d.target_replicas;
    input.style.width = "4em";
    const path = "deployments/" + encodeURIComponent(d.app) + "/" + encodeURIComponent(d.deployment) + "/scale";
    return el("span", {}, input, " ",
      AF.actionButton("scale", path, null, () => ({ replicas: parseInt(input.value, 10) })));
  }

  poll(async function () {
    const [live, recorded] = await Promise.all([
      getJSON("live/serve").catch((error) => ({ message: "live view unavailable: " + error.message })),
      getJSON("deployments?limit=50").catch(() => null),
    ]);
    const deployments = list(live, "deployments");
    const now = section("live", "Serving now");
    if (!parts) {
      parts = { empty: el("p", { class: "af-muted", id: "empty" }), serving: el("div"), replicas: el("div"), blocks: new Map() };
      replace(now, parts.empty, parts.serving, parts.replicas);
    }
    if (parts.empty.hidden !== deployments.length > 0) parts.empty.hidden = deployments.length > 0;
    if (parts.serving.hidden !== !deployments.length) parts.serving.hidden = !deployments.length;
    if (!deployments.length) {
      setText(parts.empty, live.reason || live.message || "No application is being served on this cluster right now.");
    }
    table(parts.serving, [
      { label: "app", value: (d) => d.app },
      { label: "deployment", value: (d) => d.deployment },
      { label: "status", value: (d) => d.status, cell: (d) => badge(d.status) },
      { label: "replicas", value: (d) => (d.replicas || []).length,
        cell: (d) => (d.replicas || []).filter((r) => /running/i.test(r.state)).length + " / " + d.target_replicas },
      { label: "autoscaling", value: (d) => (d.autoscaling ? d.autoscaling.min_replicas + "–" + d.autoscaling.max_replicas : "off") },
      { label: "queued", value: (d) => d.queued, num: true },
      { label: "req/s", value: (d) => d.requests_per_s, cell: (d) => number(Math.round((d.requests_per_s || 0) * 10) / 10), num: true },
      { label: "p50", value: (d) => d.p50_ms, cell: (d) => ms(d.p50_ms), num: true },
      { label: "p99", value: (d) => d.p99_ms, cell: (d) => ms(d.p99_ms), num: true },
      { label: "scale to", value: () => "", cell: scaler },
    ], deployments, { cls: "serving", key: (d) => d.app + "/" + d.deployment });
    // one heading and replica table per deployment, kept (and updated in place) while it is served
    const blocks = deployments.map((d) => {
      const key = d.app + "/" + d.deployment;
      let block = parts.blocks.get(key);
      if (!block) {
        block = { heading: el("h3", {}, key + " · replicas"), holder: el("div") };
        parts.blocks.set(key, block);
      }
      table(block.holder, [
        { label: "replica", value: (r) => r.replica },
        { label: "state", value: (r) => r.state, cell: (r) => badge(String(r.state).toLowerCase()) },
        { label: "ongoing", value: (r) => r.ongoing, num: true },
        { label: "worker", value: (r) => r.worker },
      ], d.replicas || [], { cls: "replicas", key: (r) => r.replica, empty: "no replicas" });
      return block;
    });
    const shown = new Set(deployments.map((d) => d.app + "/" + d.deployment));
    for (const key of [...parts.blocks.keys()]) if (!shown.has(key)) parts.blocks.delete(key);
    arrange(parts.replicas, blocks.flatMap((b) => [b.heading, b.holder]));
    while (parts.replicas.childNodes.length > blocks.length * 2) parts.replicas.lastChild.remove();
    if (recorded) {
      table(section("recorded", "Recorded deployments"), [
        { label: "app", value: (d) => d.app },
        { label: "deployment", value: (d) => d.deployment },
        { label: "status", value: (d) => d.status, cell: (d) => badge(d.status) },
        { label: "replicas", value: (d) => d.num_replicas, num: true },
        { label: "route", value: (d) => d.route_prefix || "" },
        { label: "address", value: (d) => d.http_address || "" },
        { label: "deployed", value: (d) => d.created_at, cell: (d) => time(d.created_at) },
      ], list(recorded, "deployments"), { sortable: true, cls: "deployments", empty: "no deployments recorded" });
    }
    return true;
  }, 1500);
})();
