/* The service's deployments: schedule, next run, state, the last runs coloured by state, and actions
 * (trigger, pause, unpause; they need the token); then the queue, with why each run waits. */
"use strict";
(function () {
  const { el, getJSON, poll, section, table, badge, time, link, list, actionButton, update } = AF;

  function schedule(d) {
    if (d.on_files) {
      const seen = d.files_seen || {};
      const last = (seen.last || [])[0];
      return "each new " + (d.on_files.pattern.endsWith("/") ? "folder" : "file") + " matching " + d.on_files.pattern +
        (d.on_files.marker ? " (once " + d.on_files.marker + " appears)" : "") + " · taken " + (seen.taken || 0) +
        (last ? ", last " + last.key + " (run " + last.run_id + ")" : "");
    }
    if (d.after) return "after each " + d.after.states.join("/") + " run of " + d.after.deployments.join(" and ");
    if (!d.schedule) return "when triggered";
    return d.schedule.every != null ? "every " + d.schedule.every + " s" : d.schedule.cron + " (" + d.schedule.timezone + ")";
  }

  function state(d) { return d.broken ? "broken" : d.paused ? "paused" : "active"; }

  /* The last runs, newest first: one badge per run, linking to it (the run's stages are on its page). */
  function lastRuns(d) {
    return el("span", { class: "af-last-runs" }, (d.last_runs || []).map((r) =>
      [el("a", { href: AF.root + "/runs/" + encodeURIComponent(r.id), title: "run " + r.id }, badge(r.status)), " "]));
  }

  function actions(d) {
    const path = "pipeline-deployments/" + encodeURIComponent(d.name) + "/";
    return el("span", {}, actionButton("trigger", path + "trigger", "Queue a run of " + d.name + " now?"), " ",
      d.paused ? actionButton("unpause", path + "unpause", null) : actionButton("pause", path + "pause", null));
  }

  poll(async function () {
    const [found, queued] = await Promise.all([getJSON("pipeline-deployments"), getJSON("queue")]);
    const deployments = list(found, "deployments");
    table(section("deployments", "Deployments"), [
      { label: "name", value: (d) => d.name },
      { label: "pipeline", value: (d) => d.pipeline },
      { label: "schedule", value: schedule },
      { label: "next run", value: (d) => d.next_due_at || "", cell: (d) => (d.next_due_at && !d.paused ? time(d.next_due_at) : "") },
      { label: "state", value: state, cell: (d) => badge(state(d)) },
      { label: "max active", value: (d) => d.max_active_runs ?? "", num: true },
      { label: "last runs", value: (d) => (d.last_runs || []).map((r) => r.status).join(" "), cell: lastRuns },
      { label: "", value: () => "", cell: actions },
    ], deployments, { cls: "pipeline-deployments", key: (d) => d.name,
      empty: "no deployments: airflowless deploy pipelines/FILE.py --name NAME --cron '0 3 * * *'" });
    const broken = deployments.filter((d) => d.broken);
    update(section("broken", null), broken.length ? [el("h2", {}, "Broken deployments"),
      ...broken.map((d) => el("div", {}, el("h3", {}, d.name + ": deploy it again with --replace once fixed"),
        el("pre", { class: "af-tb" }, d.broken)))] : []);
    table(section("queue", "Queue"), [
      { label: "run", value: (r) => r.id, cell: (r) => link("runs/" + encodeURIComponent(r.id), "#" + r.id), num: true },
      { label: "pipeline", value: (r) => r.pipeline },
      { label: "started by", value: (r) => r.trigger },
      { label: "interval", value: (r) => (r.interval_end ? r.interval_start + " – " + r.interval_end : "") },
      { label: "priority", value: (r) => r.priority ?? 0, num: true },
      { label: "pool", value: (r) => r.pool || "" },
      { label: "waiting because", value: (r) => r.queue_reason || "" },
    ], list(queued, "runs"), { cls: "queue", key: (r) => r.id, empty: "nothing queued" });
    return true;
  }, 2000);
})();
