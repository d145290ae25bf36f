/* The service's deployments: schedule, next run, state, the last runs coloured by state, and actions
 * (trigger, trigger with parameters from a form built from the pipeline's typed parameters, pause,
 * unpause; they need the token); a grid of each deployment's last runs by their stages; then the queue,
 * with why each run waits. */
"use strict";
(function () {
  const { el, getJSON, request, poll, section, table, badge, time, link, list, actionButton, update } = AF;

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
      el("button", { class: "af-action", type: "button", "data-form": d.name, onclick: () => openTrigger(d.name) },
        "trigger…"), " ",
      d.paused ? actionButton("unpause", path + "unpause", null) : actionButton("pause", path + "pause", null));
  }

  const COLLECTION = /^(list|dict|tuple|set)\b/; // edited as JSON

  /* One field per parameter, in the type it edits (an optional one, "int | None", edits an int; empty is
   * None): a checkbox for a bool, a number for an int or a float, JSON text for a list, dict or tuple, text
   * for the rest (str, paths, dates, literals). It remembers the text it first showed: only a field
   * changed from that is sent. */
  function field(p) {
    const optional = /\|\s*None$|^Optional\[/.test(p.type);
    const type = p.type.replace(/\s*\|\s*None$/, "").replace(/^Optional\[(.*)\]$/, "$1");
    const attrs = { name: p.name, "data-type": type, "data-optional": optional ? "yes" : null, "aria-label": p.name };
    let input;
    if (type === "bool") {
      input = el("input", { ...attrs, type: "checkbox", checked: p.value === true });
      input.dataset.shown = String(p.value === true);
      return input;
    }
    const shown = p.value === null || p.value === undefined ? ""
      : typeof p.value === "string" && !COLLECTION.test(type) ? p.value : JSON.stringify(p.value);
    input = type === "int" || type === "float"
      ? el("input", { ...attrs, type: "number", step: type === "int" ? "1" : "any", value: shown })
      : el("input", { ...attrs, type: "text", value: shown, size: 40 });
    input.dataset.shown = input.value; // as the browser shows it (a number field shows "nan" as empty)
    return input;
  }

  function changed(input) {
    return input.type === "checkbox" ? String(input.checked) !== input.dataset.shown : input.value !== input.dataset.shown;
  }

  /* A field's value as the trigger takes it, in the parameter's JSON type. Text that does not parse is
   * sent as it is: the server's 422 says what the parameter expects. */
  function valueOf(input) {
    const type = input.dataset.type;
    if (type === "bool") return input.checked;
    const text = input.value;
    if (text.trim() === "" && (input.dataset.optional || type !== "str")) return null;
    if (type === "int" || type === "float") return isNaN(Number(text)) ? text : Number(text);
    if (COLLECTION.test(type)) { try { return JSON.parse(text); } catch (e) { return text; } }
    return text;
  }

  /* The Trigger form: the pipeline's parameters (read from its module by the server), each filled with
   * what a run would get; "queue run" queues one with the values changed here, the rest as deployed. */
  async function openTrigger(name) {
    const holder = section("trigger", null);
    holder.replaceChildren(el("p", {}, "reading the parameters of " + name + "…"));
    let described;
    try {
      described = await request("GET", "pipeline-deployments/" + encodeURIComponent(name) + "/parameters");
    } catch (error) {
      holder.replaceChildren(el("p", { class: "af-error af-trigger-said" }, error.message));
      return;
    }
    const said = el("p", { class: "af-trigger-said" });
    const inputs = described.parameters.map(field);
    const rows = described.parameters.map((p, i) => el("tr", {},
      el("th", {}, el("label", {}, p.name)), el("td", {}, inputs[i]),
      el("td", { class: "af-muted" }, p.type + (p.required ? ", required" : "") + (p.deployed ? ", as deployed" : ""))));
    const submit = async (event) => {
      event.preventDefault();
      const params = {};
      described.parameters.forEach((p, i) => { if (changed(inputs[i])) params[p.name] = valueOf(inputs[i]); });
      said.classList.remove("af-error");
      said.textContent = "queueing…";
      try {
        const answer = await request("POST", "pipeline-deployments/" + encodeURIComponent(name) + "/trigger", { params });
        said.replaceChildren("queued ", link("runs/" + encodeURIComponent(answer.run_id), "run #" + answer.run_id),
          Object.keys(params).length ? " with " + JSON.stringify(params) : " with the deployment's parameters");
      } catch (error) {
        said.classList.add("af-error");
        said.textContent = error.message;
      }
    };
    holder.replaceChildren(el("form", { class: "af-trigger", "data-deployment": name, onsubmit: submit },
      el("h2", {}, "Trigger " + name),
      described.parameters.length ? el("table", { class: "af" }, el("tbody", {}, rows)) : el("p", {}, "it takes no parameters"),
      el("button", { type: "submit", class: "af-action" }, "queue run"), " ",
      el("button", { type: "button", class: "af-action", onclick: () => holder.replaceChildren() }, "close"),
      said));
  }

  /* Each deployment's last runs (oldest on the left) by their stages, one square per stage and run,
   * coloured by how it went and linking to the run. */
  function grid(d) {
    const runs = (d.last_runs || []).slice().reverse();
    const nodes = [];
    runs.forEach((r) => (r.stages || []).forEach((s) => { if (!nodes.includes(s.node)) nodes.push(s.node); }));
    const href = (r) => AF.root + "/runs/" + encodeURIComponent(r.id);
    const head = el("tr", {}, el("th", {}, d.name), runs.map((r) =>
      el("th", {}, el("a", { href: href(r), title: "run " + r.id + ": " + r.status + (r.interval_end ? ", interval ending " + r.interval_end : "") },
        el("span", { class: "af-cell s-" + r.status }), ""))));
    const body = nodes.map((node) => el("tr", {}, el("td", {}, node), runs.map((r) => {
      const stage = (r.stages || []).find((s) => s.node === node);
      return el("td", {}, stage ? el("a", { href: href(r), title: node + " in run " + r.id + ": " + stage.status },
        el("span", { class: "af-cell s-" + stage.status })) : "");
    })));
    return el("table", { class: "af-grid", "data-deployment": d.name }, el("thead", {}, head), el("tbody", {}, body));
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
    section("trigger", null);
    const ran = deployments.filter((d) => (d.last_runs || []).length);
    update(section("grid", "Last runs by stage"), ran.length ? ran.map(grid) : el("p", {}, "no runs yet"));
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
