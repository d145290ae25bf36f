/* Shared by every airflowless page: fetch the JSON API, build elements (text only, never
 * markup from data), sortable tables, the SVG line chart, polling and the token field. */
"use strict";

window.AF = (function () {
  const body = document.body;
  const root = body.dataset.root;
  const api = root + "/api/v1/";
  const TOKEN_KEY = "airflowless-token";
  const SVG = "http://www.w3.org/2000/svg";

  /* el("td", {class: "num"}, "text", node, ...): children are strings (text nodes) or nodes. */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

  function headers() {
    const t = token();
    return t ? { Authorization: "Bearer " + t } : {};
  }

  async function request(method, path, body) {
    const init = { method: method, headers: headers(), cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(api + path, init);
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      const message = data && data.error ? data.error : response.status + " " + response.statusText;
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  const getJSON = (path) => request("GET", path);

  /* A list out of an answer that is a list or {key: list}. */
  function list(data, ...keys) {
    if (Array.isArray(data)) return data;
    for (const key of keys) if (data && Array.isArray(data[key])) return data[key];
    return [];
  }

  /* Run refresh() now and every `ms` while it returns true; skip ticks while the tab is hidden. */
  function poll(refresh, ms) {
    const status = document.getElementById("status");
    async function tick() {
      if (document.hidden) { setTimeout(tick, ms); return; }
      let again = true;
      try {
        again = (await refresh()) !== false;
        status.textContent = "updated " + new Date().toLocaleTimeString() + (again ? " · live" : "");
        status.classList.remove("af-error");
      } catch (error) {
        status.textContent = error.message;
        status.classList.add("af-error");
        if (error.status === 404 || error.status === 503) again = error.status === 503 ? again : false;
      }
      if (again) setTimeout(tick, ms);
    }
    tick();
  }

  function replace(container, ...children) {
    container.replaceChildren();
    append(container, children);
  }

  function content() { return document.getElementById("content"); }

  /* The body of section `id` (made on first use, under `parent` or #content). */
  function section(id, title, parent) {
    let node = document.getElementById(id);
    if (!node) {
      node = el("section", { id: id }, title ? el("h2", {}, title) : null, el("div", { class: "body" }));
      (parent || content()).appendChild(node);
    }
    return node.querySelector(".body");
  }

  function badge(status) {
    const word = String(status || "unknown");
    return el("span", { class: "status s-" + word.toLowerCase().replace(/[^a-z_]/g, "") }, word);
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined || seconds === "") return "";
    const s = Number(seconds);
    if (!isFinite(s)) return "";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 120) return s.toFixed(s < 10 ? 2 : 1) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function time(value) {
    if (!value) return "";
    const date = new Date(value);
    return isNaN(date.getTime()) ? String(value) : date.toLocaleString();
  }

  function number(value) {
    if (value === null || value === undefined || value === "") return "";
    if (typeof value !== "number") return typeof value === "object" ? JSON.stringify(value) : String(value);
    if (Number.isInteger(value)) return String(value);
    if (value !== 0 && (Math.abs(value) >= 1e6 || Math.abs(value) < 0.001)) return value.toPrecision(4);
    return String(parseFloat(value.toFixed(4)));
  }

  function bytes(value) {
    if (value === null || value === undefined) return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = Number(value), i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
    return (i ? v.toFixed(1) : String(v)) + " " + units[i];
  }

  function link(path, text) { return el("a", { href: root + "/" + path }, text); }

  /* A table: columns are {label, value: row -> sortable value, cell?: row -> node/string, num?}.
   * Sortable tables keep their sort across refreshes (state lives on the container). */
  function table(container, columns, rows, options) {
    options = options || {};
    const state = container.afSort || (container.afSort = { index: options.sortIndex ?? -1, desc: !!options.sortDesc });
    let sorted = rows.slice();
    if (options.sortable && state.index >= 0) {
      const value = columns[state.index].value;
      sorted.sort((a, b) => compare(value(a), value(b)) * (state.desc ? -1 : 1));
    }
    const head = el("tr", {}, columns.map((column, index) => {
      const cls = [options.sortable ? "sortable" : "", state.index === index ? (state.desc ? "sorted-desc" : "sorted-asc") : ""];
      return el("th", {
        class: cls.join(" ").trim() || null,
        onclick: options.sortable ? () => {
          state.desc = state.index === index ? !state.desc : false;
          state.index = index;
          table(container, columns, rows, options);
        } : null,
      }, column.label);
    }));
    const bodyRows = sorted.map((row) => el("tr", { class: options.rowClass ? options.rowClass(row) : null },
      columns.map((column) => {
        const cell = column.cell ? column.cell(row) : column.value(row);
        return el("td", { class: column.num ? "num" : null }, cell instanceof Node ? cell : (column.num ? number(cell) : cell ?? ""));
      })));
    replace(container, el("table", { class: "af" + (options.cls ? " " + options.cls : "") },
      el("thead", {}, head), el("tbody", {}, bodyRows)));
    if (!rows.length && options.empty) container.appendChild(el("p", { class: "af-muted" }, options.empty));
  }

  function compare(a, b) {
    const blank = (v) => v === null || v === undefined || v === "" || (typeof v === "number" && isNaN(v));
    if (blank(a) && blank(b)) return 0;
    if (blank(a)) return 1;
    if (blank(b)) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b), undefined, { numeric: true });
  }

  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

  /* Line chart: series are {name, points: [[x, y]...], best?, inactive?, color?}. Returns an <svg>. */
  function lineChart(series, options) {
    options = options || {};
    const W = options.width || 640, H = options.height || 320, L = 60, R = 12, T = 12, B = 36;
    const all = series.flatMap((s) => s.points).filter((p) => isFinite(p[0]) && isFinite(p[1]));
    const chart = svg("svg", { class: "af-chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
    if (!all.length) {
      chart.appendChild(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, options.empty || "no data yet"));
      return chart;
    }
    let [x0, x1] = extent(all.map((p) => p[0])), [y0, y1] = extent(all.map((p) => p[1]));
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
    const axes = svg("g", { class: "axis" },
      svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B }), svg("line", { x1: L, y1: T, x2: L, y2: H - B }));
    for (const [value, i] of ticks(y0, y1)) {
      axes.appendChild(svg("text", { x: L - 6, y: (sy(value) + 4).toFixed(1), "text-anchor": "end" }, number(value)));
      if (i) axes.appendChild(svg("line", { x1: L - 3, y1: sy(value).toFixed(1), x2: L, y2: sy(value).toFixed(1) }));
    }
    for (const [value] of ticks(x0, x1)) {
      axes.appendChild(svg("text", { x: sx(value), y: H - B + 16, "text-anchor": "middle" }, number(Math.round(value * 100) / 100)));
    }
    if (options.xlabel) axes.appendChild(svg("text", { x: W - R, y: H - 4, "text-anchor": "end" }, options.xlabel));
    if (options.ylabel) axes.appendChild(svg("text", { class: "ylabel", x: L + 4, y: T + 10 }, options.ylabel));
    chart.appendChild(axes);
    const ordered = series.slice().sort((a, b) => (a.best ? 1 : 0) - (b.best ? 1 : 0)); // best drawn last, on top
    ordered.forEach((s) => {
      const pts = s.points.filter((p) => isFinite(p[0]) && isFinite(p[1]));
      if (!pts.length) return;
      const d = pts.map((p, i) => (i ? "L" : "M") + sx(p[0]).toFixed(1) + " " + sy(p[1]).toFixed(1)).join(" ");
      const color = s.color || PALETTE[series.indexOf(s) % PALETTE.length];
      const cls = ["curve", s.best ? "best" : "", s.inactive ? "inactive" : ""].filter(Boolean).join(" ");
      const path = svg("path", { class: cls, d: d, stroke: color, "data-series": s.name }, svg("title", {}, s.name));
      chart.appendChild(path);
      if (pts.length === 1) chart.appendChild(svg("circle", { cx: sx(pts[0][0]), cy: sy(pts[0][1]), r: 3, fill: color }));
    });
    return chart;
  }

  function extent(values) { return [Math.min(...values), Math.max(...values)]; }

  function ticks(lo, hi) {
    const out = [];
    for (let i = 0; i <= 4; i += 1) out.push([lo + ((hi - lo) * i) / 4, i]);
    return out;
  }

  function legend(series) {
    return el("div", { class: "af-legend" }, series.map((s, i) =>
      el("span", {}, el("i", { style: "background:" + (s.color || PALETTE[i % PALETTE.length]) }), s.name + (s.best ? " (best)" : ""))));
  }

  /* An action button: POST to path (with body(), if given) and the token; says what happened in
   * the status line. */
  function actionButton(label, path, confirmText, body) {
    return el("button", {
      class: "af-action", type: "button", "data-action": path,
      onclick: async (event) => {
        if (confirmText && !window.confirm(confirmText)) return;
        const status = document.getElementById("status");
        event.target.disabled = true;
        try {
          await request("POST", path, body ? body() : undefined);
          status.textContent = label + ": done";
          status.classList.remove("af-error");
          event.target.disabled = false;
        } catch (error) {
          status.textContent = label + ": " + error.message;
          status.classList.add("af-error");
          event.target.disabled = false;
        }
      },
    }, label);
  }

  function setupNav() {
    const page = body.dataset.page;
    const family = { run: "runs", experiment: "experiments", trial: "experiments" }[page] || page;
    document.querySelectorAll("[data-nav]").forEach((a) => { if (a.dataset.nav === family) a.classList.add("active"); });
    const input = document.getElementById("af-token");
    if (input) {
      input.value = token();
      input.addEventListener("change", () => sessionStorage.setItem(TOKEN_KEY, input.value.trim()));
    }
  }

  setupNav();

  return { root, api, el, svg, getJSON, request, list, poll, replace, content, section, badge, duration, time,
           number, bytes, link, table, lineChart, legend, actionButton, PALETTE, id: body.dataset.id };
})();
