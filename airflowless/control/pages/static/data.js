/* The Data executor while datasets stream: per execution, bytes in flight against the memory
 * budget and why the consumer waits; per operator, tasks, blocks, rows and bytes out.
 * Live only (the scheduler keeps the latest report of each execution); nothing from the record. */
"use strict";
(function () {
  const { el, getJSON, poll, content, table, replace, bytes, list } = AF;

  function meter(used, budget) {
    const share = budget ? Math.min(1, used / budget) : 0;
    return el("span", { class: "af-meter", title: (100 * share).toFixed(0) + "%" },
      el("span", { style: "width:" + (100 * share).toFixed(1) + "%" }));
  }

  /* Rows and bytes are measured where blocks reach the consumer; an operator whose blocks stayed on the workers
   * (fused into the next one, or counted/written there) says so instead of showing an empty cell. */
  function unmeasured(op, value) {
    if (value != null) return AF.number(value);
    return op.blocks ? el("span", { class: "af-muted", title: "its blocks stayed on the workers: rows and bytes are measured where blocks reach the consumer" }, "on workers") : "";
  }

  poll(async function () {
    const live = await getJSON("live/data");
    const executions = list(live, "executions");
    const container = content();
    replace(container);
    if (!executions.length) {
      container.appendChild(el("p", { class: "af-muted", id: "empty" },
        live.reason || live.message || "No dataset is streaming on this cluster right now."));
      return true;
    }
    executions.forEach((run) => {
      const box = el("section", { class: "af-execution", "data-execution": run.execution });
      box.appendChild(el("h2", {}, (run.dataset || "dataset") + " · " + (run.finished ? "finished" : "streaming")));
      box.appendChild(el("p", {}, "in flight ", bytes(run.in_flight_bytes), " of ", bytes(run.budget_bytes), " budget ",
        meter(run.in_flight_bytes || 0, run.budget_bytes || 0),
        run.waiting ? el("span", { class: "af-wait" }, " · waiting on " + run.waiting) : (run.finished ? "" : " · not waiting"),
        el("span", { class: "af-muted" }, " · execution " + run.execution)));
      const holder = el("div");
      box.appendChild(holder);
      table(holder, [
        { label: "operator", value: (o) => o.operator },
        { label: "tasks", value: (o) => o.tasks, num: true },
        { label: "done", value: (o) => o.done, num: true },
        { label: "running", value: (o) => o.running, num: true },
        { label: "blocks out", value: (o) => o.blocks, num: true },
        { label: "rows out", value: (o) => o.rows, num: true, cell: (o) => unmeasured(o, o.rows) },
        { label: "bytes out", value: (o) => o.bytes, cell: (o) => (o.bytes == null ? unmeasured(o, null) : bytes(o.bytes)), num: true },
      ], run.operators || [], { cls: "operators", empty: "no operator has started yet" });
      container.appendChild(box);
    });
    return true;
  }, 1000);
})();
