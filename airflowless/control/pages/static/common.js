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

  /* The last answer to each GET path with its ETag. The next GET of that path sends it as If-None-Match
   * and, on the server's 304 (no body), gets back that same object: a page can skip its redraw when
   * `data === last`. fetch keeps cache "no-store": the record stays out of the HTTP cache, and the 304
   * reaches this code (the browser's cache would turn it into a 200 with the old body). */
  const known = new Map();
  const KNOWN_MAX = 64;
  const fetches = { requests: 0, notModified: 0 }; // counts, read by the tests

  /* remember: false for reads that are not asked again as they are (a log's pages): their answers are
   * not kept for a 304. */
  async function request(method, path, body, remember) {
    const init = { method: method, headers: headers(), cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const keep = method === "GET" && remember !== false;
    const held = keep ? known.get(path) : undefined;
    if (held) init.headers["If-None-Match"] = held.etag;
    const response = await fetch(api + path, init);
    fetches.requests += 1;
    if (held && response.status === 304) {
      fetches.notModified += 1;
      return held.data;
    }
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (keep) {
      known.delete(path);
      const etag = response.headers.get("ETag");
      if (response.ok && etag) {
        known.set(path, { etag: etag, data: data });
        if (known.size > KNOWN_MAX) known.delete(known.keys().next().value); // the least recently answered
      }
    }
    if (!response.ok) {
      const message = data && data.error ? data.error : response.status + " " + response.statusText;
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return data;
  }

  const getJSON = (path) => request("GET", path);

  /* A read that comes in pages (metrics): each answer's `next` is the `after` of the one after it, null on
   * the last. `merge(whole, page)` returns a new answer of both (the answers as they came stay untouched:
   * they are what a 304 gives back). */
  async function getPages(path, merge) {
    let whole = await getJSON(path);
    while (whole && whole.next != null) {
      const page = await getJSON(path + (path.includes("?") ? "&" : "?") + "after=" + encodeURIComponent(whole.next));
      whole = merge(whole, page);
    }
    return whole;
  }
  const union = (a, b) => [...new Set([...(a || []), ...(b || [])])].sort();

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
   * Sortable tables keep their sort across refreshes (state lives on the container). The table is
   * updated in place: a row element per key (options.key(row), else the row's position), and only
   * the cells whose content changed are rewritten, so a refresh where nothing moved touches nothing. */
  function table(container, columns, rows, options) {
    options = options || {};
    const state = container.afSort || (container.afSort = { index: options.sortIndex ?? -1, desc: !!options.sortDesc });
    container.afLatest = { columns, rows, options };
    let sorted = rows.slice();
    if (options.sortable && state.index >= 0) {
      const value = columns[state.index].value;
      sorted.sort((a, b) => compare(value(a), value(b)) * (state.desc ? -1 : 1));
    }
    let view = container.afTable;
    const cls = "af" + (options.cls ? " " + options.cls : "");
    if (!view || view.table.parentNode !== container) {
      const tbody = el("tbody");
      view = container.afTable = { table: el("table", { class: cls }, el("thead"), tbody), tbody, head: null, rows: new Map(), empty: null };
      replace(container, view.table);
    }
    const shape = JSON.stringify(columns.map((c) => [c.label, !!c.num]));
    if (view.shape !== shape) { // other columns: the rows start again
      view.shape = shape;
      view.rows.clear();
      view.tbody.replaceChildren();
    }
    const headSig = JSON.stringify([shape, options.sortable ? state.index : -1, state.desc]);
    if (view.head !== headSig) {
      view.head = headSig;
      view.table.tHead.replaceChildren(el("tr", {}, columns.map((column, index) => {
        const sortCls = [options.sortable ? "sortable" : "", state.index === index ? (state.desc ? "sorted-desc" : "sorted-asc") : ""];
        return el("th", {
          class: sortCls.join(" ").trim() || null,
          onclick: options.sortable ? () => {
            state.desc = state.index === index ? !state.desc : false;
            state.index = index;
            const latest = container.afLatest;
            table(container, latest.columns, latest.rows, latest.options);
          } : null,
        }, column.label);
      })));
    }
    const seen = new Set();
    const order = sorted.map((row, position) => {
      let key = options.key ? String(options.key(row)) : String(position);
      if (seen.has(key)) key += "\u0001" + position; // a repeated key still gets a row of its own
      seen.add(key);
      let entry = view.rows.get(key);
      if (!entry) {
        const cells = columns.map((column) => ({ td: el("td", { class: column.num ? "num" : null }), sig: null }));
        entry = { tr: el("tr", {}, cells.map((c) => c.td)), cells };
        view.rows.set(key, entry);
      }
      columns.forEach((column, i) => {
        const raw = column.cell ? column.cell(row) : column.value(row);
        const content = raw instanceof Node ? raw : (column.num ? number(raw) : String(raw ?? ""));
        const sig = content instanceof Node ? "\u0001" + signature(content) : content;
        const cell = entry.cells[i];
        if (cell.sig === sig) return;
        cell.sig = sig;
        if (content instanceof Node) cell.td.replaceChildren(content);
        else cell.td.textContent = content;
      });
      setClass(entry.tr, options.rowClass ? options.rowClass(row) : null);
      return entry.tr;
    });
    for (const [key, entry] of view.rows) if (!seen.has(key)) { entry.tr.remove(); view.rows.delete(key); }
    arrange(view.tbody, order);
    if (!rows.length && options.empty) {
      if (!view.empty) { view.empty = el("p", { class: "af-muted" }, options.empty); container.appendChild(view.empty); }
    } else if (view.empty) { view.empty.remove(); view.empty = null; }
  }

  /* Put `nodes` in this order as the children of `parent`, moving only those out of place. */
  function arrange(parent, nodes) {
    nodes.forEach((node, i) => {
      const here = parent.childNodes[i];
      if (here !== node) parent.insertBefore(node, here || null);
    });
  }

  function setClass(node, value) {
    if (value) { if (node.getAttribute("class") !== value) node.setAttribute("class", value); }
    else if (node.hasAttribute("class")) node.removeAttribute("class");
  }

  function setAttr(node, name, value) {
    const text = String(value);
    if (node.getAttribute(name) !== text) node.setAttribute(name, text);
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  /* What a built node shows, as a string to compare (tags, attributes and text, read back from
   * the node; never parsed, never put into the page). */
  function signature(node) {
    if (node.nodeType !== 1) return JSON.stringify(node.textContent);
    let out = "<" + node.tagName;
    for (const attr of node.attributes) out += " " + attr.name + "=" + JSON.stringify(attr.value);
    out += ">";
    for (const child of node.childNodes) out += signature(child);
    return out + "</>";
  }

  /* replace(), but only when what would be put there differs from what is there (compared by
   * signature() of the freshly built nodes, which are dropped when equal). */
  function update(container, ...children) {
    const holder = document.createElement("div");
    append(holder, children);
    const sig = [...holder.childNodes].map(signature).join("");
    if (container.afSig === sig && container.childNodes.length === holder.childNodes.length) return false;
    container.afSig = sig;
    container.replaceChildren(...holder.childNodes);
    return true;
  }

  function compare(a, b) {
    const blank = (v) => v === null || v === undefined || v === "" || (typeof v === "number" && isNaN(v));
    if (blank(a) && blank(b)) return 0;
    if (blank(a)) return 1;
    if (blank(b)) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a).localeCompare(String(b), undefined, { numeric: true });
  }

  // Okabe and Ito's colours, told apart with any colour vision (the yellow, faint on white, left out)
  const PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"];

  /* Line chart: series are {name, points: [[x, y]...], best?, inactive?, color?}. Returns an <svg>. */
  /* A chart's scales over [x0, x1] x [y0, y1] (widened when flat), and axes() making its axes' elements. */
  function frame(x0, x1, y0, y1, W, H, options) {
    const L = 60, R = 12, T = 12, B = 36;
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    if (y0 === y1) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
    const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
    const sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
    const axes = () => {
      const parts = [svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B }), svg("line", { x1: L, y1: T, x2: L, y2: H - B })];
      for (const [value, i] of ticks(y0, y1)) {
        parts.push(svg("text", { x: L - 6, y: (sy(value) + 4).toFixed(1), "text-anchor": "end" }, number(value)));
        if (i) parts.push(svg("line", { x1: L - 3, y1: sy(value).toFixed(1), x2: L, y2: sy(value).toFixed(1) }));
      }
      for (const [value] of (options.integerX ? wholeTicks(x0, x1) : ticks(x0, x1))) {
        parts.push(svg("text", { x: sx(value), y: H - B + 16, "text-anchor": "middle" }, number(Math.round(value * 100) / 100)));
      }
      if (options.xlabel) parts.push(svg("text", { x: W - R, y: H - 4, "text-anchor": "end" }, options.xlabel));
      if (options.ylabel) parts.push(svg("text", { class: "ylabel", x: L + 4, y: T + 10 }, options.ylabel));
      return parts;
    };
    return { sx, sy, axes };
  }

  function lineChart(series, options) {
    options = options || {};
    const W = options.width || 640, H = options.height || 320;
    const all = series.flatMap((s) => s.points).filter((p) => isFinite(p[0]) && isFinite(p[1]));
    const chart = svg("svg", { class: "af-chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
    if (!all.length) {
      chart.appendChild(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, options.empty || "no data yet"));
      return chart;
    }
    const [x0, x1] = extent(all.map((p) => p[0])), [y0, y1] = extent(all.map((p) => p[1]));
    const { sx, sy, axes } = frame(x0, x1, y0, y1, W, H, options);
    chart.appendChild(svg("g", { class: "axis" }, ...axes()));
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

  /* lineChart() kept up to date in `holder`: a path per series (by s.key, else s.name), whose
   * "d" is recomputed only when its points changed (a new points array) or the axes' range did;
   * the axes are redrawn only when the range changes. Returns whether anything was touched. */
  function liveChart(holder, series, options) {
    options = options || {};
    const W = options.width || 640, H = options.height || 320;
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const s of series) {
      for (const p of s.points) {
        if (!isFinite(p[0]) || !isFinite(p[1])) continue;
        if (p[0] < x0) x0 = p[0];
        if (p[0] > x1) x1 = p[0];
        if (p[1] < y0) y0 = p[1];
        if (p[1] > y1) y1 = p[1];
      }
    }
    let state = holder.afChart;
    if (x0 === Infinity) {
      const sig = "empty\u0001" + (options.empty || "no data yet");
      if (state && state.sig === sig) return false;
      holder.afChart = { sig };
      replace(holder, lineChart([], options));
      return true;
    }
    if (!state || !state.curves || state.chart.parentNode !== holder) {
      const chart = svg("svg", { class: "af-chart", width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
      state = holder.afChart = { chart, axes: svg("g", { class: "axis" }), curves: svg("g", { class: "curves" }),
        dots: svg("g", { class: "dots" }), sig: null, byKey: new Map() };
      chart.append(state.axes, state.curves, state.dots);
      replace(holder, chart);
    }
    const { sx, sy, axes } = frame(x0, x1, y0, y1, W, H, options);
    let touched = false;
    const sig = JSON.stringify([x0, x1, y0, y1, options.xlabel || "", options.ylabel || ""]);
    const rescaled = state.sig !== sig;
    if (rescaled) {
      state.sig = sig;
      touched = true;
      state.axes.replaceChildren(...axes());
    }
    const seen = new Set(), paths = [], bestPaths = [], dots = [];
    series.forEach((s, index) => {
      const key = String(s.key ?? s.name);
      seen.add(key);
      let entry = state.byKey.get(key);
      if (!entry) {
        entry = { path: svg("path", { class: "curve" }), title: svg("title"), points: null, dot: null };
        entry.path.appendChild(entry.title);
        state.byKey.set(key, entry);
        touched = true;
      }
      if (rescaled || entry.points !== s.points) {
        entry.points = s.points;
        const pts = s.points.filter((p) => isFinite(p[0]) && isFinite(p[1]));
        entry.count = pts.length;
        const d = pts.map((p, i) => (i ? "L" : "M") + sx(p[0]).toFixed(1) + " " + sy(p[1]).toFixed(1)).join(" ");
        if (entry.path.getAttribute("d") !== d) { entry.path.setAttribute("d", d); touched = true; }
        entry.dotAt = pts.length === 1 ? [sx(pts[0][0]), sy(pts[0][1])] : null;
      }
      if (!entry.count) return;
      const color = s.color || PALETTE[index % PALETTE.length];
      const cls = ["curve", s.best ? "best" : "", s.inactive ? "inactive" : ""].filter(Boolean).join(" ");
      const before = entry.path.getAttribute("class") + entry.path.getAttribute("stroke") + entry.path.dataset.series + entry.title.textContent;
      setAttr(entry.path, "class", cls);
      setAttr(entry.path, "stroke", color);
      setAttr(entry.path, "data-series", s.name);
      setText(entry.title, s.name);
      if (before !== cls + color + s.name + s.name) touched = true;
      (s.best ? bestPaths : paths).push(entry.path); // best drawn last, on top
      if (entry.dotAt) {
        if (!entry.dot) entry.dot = svg("circle", { r: 3 });
        setAttr(entry.dot, "cx", entry.dotAt[0]);
        setAttr(entry.dot, "cy", entry.dotAt[1]);
        setAttr(entry.dot, "fill", color);
        dots.push(entry.dot);
      }
    });
    for (const [key, entry] of state.byKey) if (!seen.has(key)) { state.byKey.delete(key); }
    const wanted = paths.concat(bestPaths);
    const keep = new Set(wanted.concat(dots));
    for (const group of [state.curves, state.dots]) {
      for (const node of [...group.childNodes]) if (!keep.has(node)) { node.remove(); touched = true; }
    }
    arrange(state.curves, wanted);
    arrange(state.dots, dots);
    return touched;
  }

  function extent(values) { return [Math.min(...values), Math.max(...values)]; }

  function ticks(lo, hi) {
    const out = [];
    for (let i = 0; i <= 4; i += 1) out.push([lo + ((hi - lo) * i) / 4, i]);
    return out;
  }

  /* Ticks on whole numbers only (iterations: never a tick at 10.75), at most about five. */
  function wholeTicks(lo, hi) {
    const step = Math.max(1, Math.ceil((hi - lo) / 4));
    const out = [];
    for (let v = Math.ceil(lo); v <= hi; v += step) out.push([v, out.length]);
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

  return { root, api, el, svg, getJSON, getPages, union, request, fetches, list, poll, replace, content, section, badge, duration, time,
           number, bytes, link, table, lineChart, liveChart, legend, actionButton, update, setText, setAttr, arrange,
           PALETTE, id: body.dataset.id };
})();
