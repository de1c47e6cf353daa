// Committee dashboard: polls the JSON API and updates every model's card in place.
//
// ?every=<ms> sets the polling period (default 1000, at least 100). Charts are drawn as
// inline SVG; nothing is fetched from anywhere but this service.
//
// The statistics of up to MAX_STREAMS models come pushed, from each one's event stream
// (GET /v1/models/{name}/events, read with fetch so that the key stays in a header);
// the others' are polled, and so are a model's whose stream failed, until it is open
// again (resumed after the last event's id). The list of models, the endpoints and the
// backtests are polled always.
//
// While the service has API keys, a request without one answers 401: the page then asks
// for a read key, keeps it in this tab's session storage only (never a cookie, never
// local storage, never the URL) and sends it as "Authorization: Bearer" from then on. A
// key answered with a 401 is dropped and asked for again; a 403 or 404 is said in words.
// Whenever no valid key is known, nothing of the models is shown.
"use strict";

(() => {
  const SVG = "http://www.w3.org/2000/svg";
  const MAX_BARS = 16; // sub-expert weights shown per model, the largest ones
  const CONCURRENCY = 8; // stats requests in flight at once
  const REFRESH_MS = 5000; // stats of an unchanged model are read again after this long
  // event streams open at once: a browser opens six HTTP/1.1 connections to a host at
  // most, and the polls need theirs
  const MAX_STREAMS = 4;
  const STREAM_RETRY_MS = 5000; // a failed stream is tried again after this long
  const CONTEXT = new Set(["kind", "learner", "learners", "labels", "n_features", "n_experts"]);

  const every = (() => {
    const v = Number.parseInt(new URLSearchParams(location.search).get("every") ?? "", 10);
    return Number.isFinite(v) ? Math.min(Math.max(v, 100), 60000) : 1000;
  })();

  const KEY_ITEM = "committee.api-key"; // sessionStorage: gone when the tab closes
  const grid = document.getElementById("models");
  const template = document.getElementById("card-template");
  const cards = new Map(); // name -> {el, field(name), key, stats, fetched}
  let polls = 0;

  // ---- formatting -----------------------------------------------------------------------

  const ints = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  const int = (v) => (v === null || v === undefined ? "—" : ints.format(v));
  const rate = (v) => (v === null || v === undefined ? "—" : `${(100 * v).toFixed(2)} %`);
  const weight = (w) => (Math.abs(w) >= 0.001 || w === 0 ? w.toPrecision(3) : w.toExponential(1));
  const clock = (d) => d.toLocaleTimeString("en-GB", { hour12: false });

  function describe(spec) {
    if (!spec || typeof spec !== "object") return String(spec);
    const params = Object.entries(spec)
      .filter(([k, v]) => !CONTEXT.has(k) && v !== null && v !== undefined)
      .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`);
    let text = params.length ? `${spec.kind}(${params.join(", ")})` : String(spec.kind);
    if (Array.isArray(spec.learners)) {
      text += ` over ${spec.learners.map(describe).join(" | ")}`;
    }
    if (spec.learner && typeof spec.learner === "object") text += ` / ${describe(spec.learner)}`;
    return text;
  }

  function describeInput(input) {
    const parts = [];
    const experts = input?.experts;
    if (experts) {
      const n = experts.expert_names?.length;
      parts.push(n ? `${n} sub-experts` : "sub-experts");
    }
    const attrs = input?.attributes;
    if (attrs) {
      const n = attrs.n_features ?? attrs.feature_names?.length ?? attrs.hashing?.n_features;
      parts.push(n ? `${int(n)} attributes` : "attributes");
    }
    return parts.join(" + ");
  }

  // ---- DOM helpers ----------------------------------------------------------------------

  function svg(tag, attrs, parent) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
    if (parent) parent.appendChild(el);
    return el;
  }

  function text(el, value) {
    if (el.textContent !== value) el.textContent = value;
  }

  function setStatus(state, message) {
    const box = document.getElementById("status");
    box.dataset.state = state;
    box.title = message;
    text(document.getElementById("status-text"), message);
  }

  // "nice" upper bound and tick step for an axis from 0 to max
  function ticks(max, count) {
    if (!(max > 0)) return { top: 1, step: 1 };
    const raw = max / count;
    const mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw);
    const rounded = Math.max(1, step);
    return { top: Math.ceil(max / rounded) * rounded, step: rounded };
  }

  // ---- cards ----------------------------------------------------------------------------

  function makeCard(name) {
    const el = template.content.firstElementChild.cloneNode(true);
    el.dataset.model = name;
    const fields = new Map();
    for (const f of el.querySelectorAll("[data-field]")) fields.set(f.dataset.field, f);
    const card = {
      el,
      field: (n) => fields.get(n),
      panel: (n) => el.querySelector(`[data-panel="${n}"]`),
      key: null,
      stats: null,
      fetched: 0,
      events: null, // the event stream: {abort, live, lastId}, or null
      retryAt: 0, // when a failed stream may be tried again
    };
    el.dataset.events = "polling";
    text(card.field("name"), name);
    setupHover(card);
    return card;
  }

  function syncCards(models) {
    const names = models.map((m) => m.name).sort();
    for (const [name, card] of cards) {
      if (!names.includes(name)) {
        closeEvents(card);
        card.el.remove();
        cards.delete(name);
      }
    }
    let previous = null;
    for (const name of names) {
      let card = cards.get(name);
      if (!card) {
        card = makeCard(name);
        cards.set(name, card);
      }
      const want = previous ? previous.nextSibling : grid.firstChild;
      if (card.el !== want) grid.insertBefore(card.el, want);
      previous = card.el;
    }
    text(document.getElementById("model-count"), String(names.length));
    text(document.getElementById("model-noun"), names.length === 1 ? "model" : "models");
    document.getElementById("empty").hidden = names.length > 0;
  }

  function renderModel(card, m) {
    text(card.field("kind"), m.learner?.kind ?? "?");
    const labels = `${m.labels.length} labels`;
    text(card.field("spec"), [describe(m.learner), describeInput(m.input), labels].join(" · "));
  }

  function renderStats(card, s) {
    // the trials the error rate is over: those judged (the confusion counts' sum)
    let judged = 0;
    for (const row of Object.values(s.confusion)) {
      for (const n of Object.values(row)) judged += n;
    }
    const values = {
      version: int(s.version),
      mistakes: int(s.mistakes),
      error_rate: rate(s.error_rate),
      window_error_rate: rate(s.window.error_rate),
      rate_trials: judged ? `all ${int(judged)}` : "",
      window_trials: s.window.trials ? `last ${int(s.window.trials)}` : "",
      window_mistakes: int(s.window.mistakes),
      labelled: int(s.labelled),
      learned: int(s.learned),
      pending: int(s.pending),
      expired: int(s.expired),
      predictions: int(s.predictions),
      updates: int(s.updates),
      late_labels: int(s.late_labels),
      quarantined: int(s.quarantined),
      refused: int(s.refused),
    };
    for (const [name, value] of Object.entries(values)) text(card.field(name), value);
    card.field("quarantined").closest("div").classList.toggle("alert", s.quarantined > 0);
    card.field("error_rate").dataset.value = s.error_rate ?? "";
    card.field("window_error_rate").dataset.value = s.window.error_rate ?? "";

    drawCurve(card, s.curve, s.changes || []);
    drawExperts(card, s.experts);
    drawScorecards(card, s.scorecards);
    drawLearners(card, s.learners, s.leader);
    const internal = card.panel("internal");
    internal.hidden = !s.internal;
    if (s.internal) {
      for (const k of ["trials", "mistakes", "updates"]) {
        text(card.field(`internal_${k}`), int(s.internal[k]));
      }
    }

    const foot = card.field("freshness");
    const summaryBehind = s.version > 0 && s.summary_version < s.version;
    const behind = s.folded < s.version || summaryBehind;
    foot.classList.toggle("lag", behind);
    text(
      foot,
      `folded ${int(s.folded)} of ${int(s.version)} trials` +
        (summaryBehind ? ` · learner summary at ${int(Math.max(s.summary_version, 0))}` : "") +
        ` · read ${clock(new Date())}`,
    );
  }

  // ---- the mistake curve ----------------------------------------------------------------

  const CURVE = { w: 440, h: 180, left: 46, right: 14, top: 10, bottom: 26 };

  function drawCurve(card, curve, changes) {
    const el = card.el.querySelector('[data-chart="curve"]');
    el.replaceChildren();
    el.dataset.points = String(curve.length);
    el.dataset.marks = "0";
    const { w, h, left, right, top, bottom } = CURVE;
    const pw = w - left - right;
    const ph = h - top - bottom;
    const last = curve.length ? curve[curve.length - 1] : [0, 0];
    // the x axis ends at the last trial, so the curve always spans the chart
    const xs = { top: Math.max(last[0], 1), step: ticks(last[0], 5).step };
    const ys = ticks(
      Math.max(...curve.map((p) => p[1]), backtestTop(card, curve), challengersTop(card, curve), 1),
      4,
    );
    const x = (t) => left + (pw * t) / xs.top;
    const y = (m) => top + ph - (ph * m) / ys.top;
    card.scale = { x, y, curve, xs };

    for (let v = 0; v <= ys.top + 1e-9; v += ys.step) {
      svg("line", { class: "gridline", x1: left, x2: w - right, y1: y(v), y2: y(v) }, el);
      const label = svg("text", { x: left - 6, y: y(v) + 3.5, "text-anchor": "end" }, el);
      label.textContent = int(v);
    }
    for (let v = 0; v <= xs.top + 1e-9; v += xs.step) {
      svg("line", { class: "axis", x1: x(v), x2: x(v), y1: top + ph, y2: top + ph + 4 }, el);
      const label = svg("text", { x: x(v), y: h - 8, "text-anchor": "middle" }, el);
      label.textContent = int(v);
    }
    svg("line", { class: "axis", x1: left, x2: w - right, y1: top + ph, y2: top + ph }, el);

    if (!curve.length) {
      const note = svg("text", { class: "nodata", x: left + pw / 2, y: top + ph / 2 }, el);
      note.setAttribute("text-anchor", "middle");
      note.textContent = "no trials yet";
      return;
    }
    const points = (curve[0][0] > 0 ? [[0, 0], ...curve] : curve).map(
      ([t, m]) => `${x(t).toFixed(1)},${y(m).toFixed(1)}`,
    );
    const base = top + ph;
    svg("path", { class: "area", d: `M${x(0)},${base}L${points.join("L")}L${x(last[0])},${base}Z` }, el);
    svg("polyline", { class: "line", points: points.join(" ") }, el);
    drawBacktest(card, el, x, y, xs);
    drawChallengers(card, el, x, y, xs);
    // the model's changes (experts, labels, features, imported states) where they happened
    const marks = changes.filter((c) => c.version <= xs.top);
    for (const c of marks) {
      const g = svg("g", { class: "mark", "data-version": c.version }, el);
      svg("line", { x1: x(c.version), x2: x(c.version), y1: top, y2: base }, g);
      svg("title", {}, g).textContent = `trial ${int(c.version)}: ${c.what}`;
    }
    el.dataset.marks = String(marks.length);
    svg("circle", { class: "last", cx: x(last[0]), cy: y(last[1]), r: 3 }, el);
    card.cross = svg("line", { class: "cross", x1: 0, x2: 0, y1: top, y2: base, visibility: "hidden" }, el);
  }

  function liveAt(curve, version) {
    let m = 0;
    for (const [t, v] of curve) if (t <= version) m = v;
    return m;
  }

  function backtestTop(card, curve) {
    const result = card.backtest?.result;
    if (!result) return 0;
    const offset = liveAt(curve, result.from_version);
    return Math.max(0, ...result.candidates.map((c) => c.mistakes + offset));
  }

  // the latest backtest's candidates beside the live curve: each counts its mistakes from
  // the backtest's from_version on, so it starts where the live curve was there
  function drawBacktest(card, el, x, y, xs) {
    const result = card.backtest?.result;
    el.dataset.candidates = "0";
    if (!result) return;
    const from = result.from_version;
    const offset = liveAt(card.scale.curve, from);
    const shown = result.candidates.filter((c) => c.curve.length);
    shown.forEach((c, i) => {
      const points = [[from, 0], ...c.curve]
        .filter(([t]) => t <= xs.top)
        .map(([t, m]) => `${x(t).toFixed(1)},${y(m + offset).toFixed(1)}`);
      const g = svg("g", { class: `candidate c${i % 4}`, "data-mistakes": c.mistakes }, el);
      svg("polyline", { points: points.join(" ") }, g);
      svg("title", {}, g).textContent =
        `backtest: ${describe(c.learner)}, ${int(c.mistakes)} mistakes in ${int(c.trials)} ` +
        `trials after ${int(from)} (the model: ${int(result.model.mistakes)})`;
    });
    el.dataset.candidates = String(shown.length);
  }

  // a challenger's point: [trials since it was attached, its mistakes, the live learner's]
  function challengerPoints(curve, c) {
    const offset = liveAt(curve, c.attached);
    return [[0, 0, 0], ...c.curve].map(([t, m]) => [c.attached + t, m + offset]);
  }

  function challengersTop(card, curve) {
    const shown = card.challengers?.challengers || [];
    return Math.max(0, ...shown.map((c) => c.mistakes + liveAt(curve, c.attached)));
  }

  // the shadow challengers beside the live curve, dashed: each counts its mistakes on the
  // trials after it was attached, so it starts where the live curve was then
  function drawChallengers(card, el, x, y, xs) {
    const shown = card.challengers?.challengers || [];
    el.dataset.challengers = String(shown.length);
    shown.forEach((c, i) => {
      const points = challengerPoints(card.scale.curve, c)
        .filter(([t]) => t <= xs.top)
        .map(([t, m]) => `${x(t).toFixed(1)},${y(m).toFixed(1)}`);
      const g = svg("g", { class: `challenger c${i % 4}`, "data-name": c.name, "data-mistakes": c.mistakes }, el);
      svg("polyline", { points: points.join(" ") }, g);
      svg("title", {}, g).textContent =
        `challenger ${c.name}: ${describe(c.learner)}, ${int(c.mistakes)} mistakes in ` +
        `${int(c.trials)} trials since ${int(c.attached)} (the model: ${int(c.live_mistakes)})`;
    });
  }

  function setupHover(card) {
    const el = card.el.querySelector('[data-chart="curve"]');
    const tip = card.el.querySelector(".tip");
    el.addEventListener("mousemove", (event) => {
      const s = card.scale;
      if (!s || !s.curve.length) return;
      const box = el.getBoundingClientRect();
      const vx = ((event.clientX - box.left) / box.width) * CURVE.w;
      const t = ((vx - CURVE.left) / (CURVE.w - CURVE.left - CURVE.right)) * s.xs.top;
      let best = s.curve[0];
      for (const p of s.curve) if (Math.abs(p[0] - t) < Math.abs(best[0] - t)) best = p;
      card.cross.setAttribute("x1", s.x(best[0]));
      card.cross.setAttribute("x2", s.x(best[0]));
      card.cross.setAttribute("visibility", "visible");
      tip.hidden = false;
      tip.textContent = `trial ${int(best[0])}: ${int(best[1])} mistakes`;
      const px = (s.x(best[0]) / CURVE.w) * box.width;
      tip.style.left = `${Math.min(px + 8, box.width - tip.offsetWidth)}px`;
    });
    el.addEventListener("mouseleave", () => {
      tip.hidden = true;
      card.cross?.setAttribute("visibility", "hidden");
    });
  }

  // ---- sub-expert weights ---------------------------------------------------------------

  function drawExperts(card, experts) {
    const panel = card.panel("experts");
    const entries = experts ? Object.entries(experts) : [];
    panel.hidden = entries.length === 0;
    const el = panel.querySelector('[data-chart="experts"]');
    el.replaceChildren();
    entries.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const shown = entries.slice(0, MAX_BARS);
    el.dataset.bars = String(shown.length);
    el.dataset.total = String(entries.length);
    text(
      card.field("experts_note"),
      entries.length > shown.length ? `largest ${shown.length} of ${entries.length}` : "",
    );
    if (!shown.length) return;

    const row = 20;
    const labelW = 150;
    const valueW = 52;
    const w = 440;
    const barW = w - labelW - valueW;
    const scale = Math.max(...shown.map(([, v]) => Math.abs(v))) || 1;
    el.setAttribute("viewBox", `0 0 ${w} ${shown.length * row}`);
    shown.forEach(([name, value], i) => {
      const g = svg("g", { "data-expert": name, "data-weight": value }, el);
      const y = i * row;
      const label = svg("text", { class: "bar-label", x: labelW - 8, y: y + 14, "text-anchor": "end" }, g);
      const short = name.replace(/^expert:/, "");
      label.textContent = short.length > 24 ? `${short.slice(0, 23)}…` : short;
      svg("title", {}, g).textContent = `${name}: ${value}`;
      svg("rect", { class: "bar-track", x: labelW, y: y + 4, width: barW, height: 12, rx: 2 }, g);
      const width = Math.max((barW * Math.abs(value)) / scale, value === 0 ? 0 : 1);
      const cls = value < 0 ? "bar neg" : "bar";
      svg("rect", { class: cls, x: labelW, y: y + 4, width: width.toFixed(1), height: 12, rx: 2 }, g);
      const v = svg("text", { class: "bar-value", x: w, y: y + 14, "text-anchor": "end" }, g);
      v.textContent = weight(value);
    });
  }

  // ---- the classifiers' scorecards --------------------------------------------------------

  const SCORE_KEYS = {
    expert: (c) => c.expert,
    trials: (c) => c.trials,
    error_rate: (c) => c.error_rate,
    recent_error_rate: (c) => c.recent.error_rate,
    agreement: (c) => c.agreement,
    weight: (c) => c.weight,
  };

  // a card's sort: by the column last clicked (clicking it again turns it around); the
  // input's order until one is; nulls last either way
  function sortCards(cards, sort) {
    const rows = cards.map((c, i) => ({ c, i }));
    if (!sort) return rows.map((r) => r.c);
    const key = SCORE_KEYS[sort.key];
    const sign = sort.dir === "ascending" ? 1 : -1;
    rows.sort((a, b) => {
      const u = key(a.c);
      const v = key(b.c);
      if (u === null || u === undefined) return v === null || v === undefined ? a.i - b.i : 1;
      if (v === null || v === undefined) return -1;
      const by = typeof u === "string" ? u.localeCompare(v) : u - v;
      return sign * by || a.i - b.i;
    });
    return rows.map((r) => r.c);
  }

  function setupSort(card, panel) {
    if (panel.dataset.sortable) return;
    panel.dataset.sortable = "true";
    for (const th of panel.querySelectorAll("th[data-sort]")) {
      th.addEventListener("click", () => {
        const same = card.scoreSort?.key === th.dataset.sort;
        const dir = same && card.scoreSort.dir === "ascending" ? "descending" : "ascending";
        card.scoreSort = { key: th.dataset.sort, dir: same ? dir : "ascending" };
        for (const h of panel.querySelectorAll("th[data-sort]")) {
          h.setAttribute("aria-sort", h === th ? card.scoreSort.dir : "none");
        }
        drawScorecards(card, card.scorecards);
      });
    }
  }

  // a classifier's recent error rate, block by block (oldest first), as a small line
  function sparkline(values) {
    const w = 90;
    const h = 18;
    const el = svg("svg", { class: "spark", viewBox: `0 0 ${w} ${h}`, "data-points": values.length });
    svg("line", { x1: 0, x2: w, y1: h - 1, y2: h - 1 }, el);
    const step = values.length > 1 ? w / (values.length - 1) : 0;
    const points = values.map((v, i) => `${(i * step).toFixed(1)},${(h - 1 - (h - 2) * v).toFixed(1)}`);
    if (values.length === 1) points.push(`${w},${(h - 1 - (h - 2) * values[0]).toFixed(1)}`);
    if (points.length) svg("polyline", { points: points.join(" ") }, el);
    svg("title", {}, el).textContent = values.length
      ? `error rate in blocks of its recent trials, oldest first: ${values.map((v) => rate(v)).join(", ")}`
      : "no trials yet";
    return el;
  }

  function drawScorecards(card, cards) {
    const panel = card.panel("scorecards");
    card.scorecards = cards;
    panel.hidden = !cards || cards.length === 0;
    if (panel.hidden) return;
    setupSort(card, panel);
    const rows = sortCards(cards, card.scoreSort).map((c) => {
      const tr = document.createElement("tr");
      tr.dataset.scorecard = c.expert;
      tr.dataset.retired = String(c.retired);
      const who = document.createElement("td");
      who.className = "who";
      who.textContent = c.expert;
      who.title = `confusion (true label → its top vote): ${JSON.stringify(c.confusion)}`;
      tr.appendChild(who);
      const cells = [
        ["trials", int(c.trials), c.trials],
        ["error_rate", rate(c.error_rate), c.error_rate],
        ["recent_error_rate", rate(c.recent.error_rate), c.recent.error_rate],
        ["agreement", rate(c.agreement), c.agreement],
        ["weight", c.weight === null ? "—" : weight(c.weight), c.weight],
      ];
      for (const [k, shown, value] of cells) {
        const td = document.createElement("td");
        td.className = "num";
        td.dataset.score = k; // not a data-field: those are the card's own
        td.dataset.value = value ?? "";
        td.textContent = shown;
        tr.appendChild(td);
      }
      const spark = document.createElement("td");
      spark.appendChild(sparkline(c.spark));
      tr.appendChild(spark);
      return tr;
    });
    panel.querySelector("tbody").replaceChildren(...rows);
  }

  // ---- V-Combine's basic learners -------------------------------------------------------

  function drawLearners(card, learners, leader) {
    const panel = card.panel("learners");
    panel.hidden = !learners || learners.length === 0;
    if (panel.hidden) return;
    text(card.field("leader"), leader ?? "—");
    const body = panel.querySelector("tbody");
    const most = Math.max(...learners.map((l) => l.mistakes), 1);
    const rows = learners.map((l) => {
      const tr = document.createElement("tr");
      tr.dataset.learner = l.name;
      tr.dataset.leader = String(l.name === leader);
      const who = document.createElement("td");
      who.className = "who";
      who.textContent = l.name;
      const meter = document.createElement("span");
      meter.className = "meter";
      const fill = document.createElement("span");
      fill.style.width = `${((100 * l.mistakes) / most).toFixed(1)}%`;
      meter.appendChild(fill);
      who.appendChild(meter);
      tr.appendChild(who);
      for (const k of ["mistakes", "recent_mistakes"]) {
        const td = document.createElement("td");
        td.className = "num";
        td.dataset.field = k;
        td.textContent = int(l[k]);
        tr.appendChild(td);
      }
      return tr;
    });
    body.replaceChildren(...rows);
  }

  // ---- the experts' endpoints (fan-out) ---------------------------------------------------

  const hasEndpoints = (m) => Object.keys(m.input?.experts?.endpoints ?? {}).length > 0;

  function drawEndpoints(card, doc) {
    const panel = card.panel("endpoints");
    panel.hidden = !doc || doc.endpoints.length === 0;
    if (panel.hidden) return;
    text(card.field("deadline_ms"), int(doc.deadline_ms));
    const rows = doc.endpoints.map((e) => {
      const tr = document.createElement("tr");
      tr.dataset.expert = e.expert;
      tr.dataset.breaker = e.breaker;
      const who = document.createElement("td");
      who.className = "who";
      who.textContent = e.expert;
      const url = document.createElement("span");
      url.className = "url";
      url.textContent = e.refused ? `not called: ${e.refused}` : `${e.protocol} ${e.url}`;
      who.appendChild(url);
      const counts = Object.entries(e.recent);
      const cells = [
        ["breaker", e.breaker],
        ["failures", int(e.failures)],
        ["recent", counts.length ? counts.map(([k, n]) => `${k} ${int(n)}`).join(" · ") : "—"],
      ];
      tr.appendChild(who);
      for (const [k, v] of cells) {
        const td = document.createElement("td");
        td.dataset.field = k;
        if (k === "failures") td.className = "num";
        if (k === "recent") td.dataset.counts = JSON.stringify(e.recent);
        td.textContent = v;
        tr.appendChild(td);
      }
      return tr;
    });
    panel.querySelector("tbody").replaceChildren(...rows);
  }

  // each poll: breakers and recent answers change without the model changing
  async function readEndpoints(models, secret, mine) {
    const reads = models.filter(hasEndpoints).map(async (m) => {
      try {
        const doc = await getJSON(`v1/models/${encodeURIComponent(m.name)}/endpoints`, secret);
        if (mine === session) drawEndpoints(cards.get(m.name), doc);
      } catch (e) {
        if (e.status !== 404) throw e; // deleted since the listing: gone next poll
      }
    });
    for (const m of models) if (!hasEndpoints(m)) drawEndpoints(cards.get(m.name), null);
    await Promise.all(reads);
  }

  // ---- the API key ----------------------------------------------------------------------

  const keyForm = document.getElementById("key-form");
  const keyInput = document.getElementById("key-input");
  const keyNote = document.getElementById("key-note");
  const signOut = document.getElementById("sign-out");
  const problem = document.getElementById("problem");
  const PRINTABLE = /^[\x21-\x7e]+$/; // what an Authorization header can carry of a key
  let session = 0; // bumped when the key changes: answers to older requests are dropped
  let timer = null; // the next poll (none while the form waits for a key)
  let notice = ""; // what the form says if the next answer is a 401 without a key

  function apiKey() {
    return sessionStorage.getItem(KEY_ITEM);
  }

  // forget everything drawn: without a valid key the page shows no model data
  function clearModels() {
    for (const card of cards.values()) {
      closeEvents(card);
      card.el.remove();
    }
    cards.clear();
    text(document.getElementById("model-count"), "0");
    document.getElementById("empty").hidden = true;
  }

  function showProblem(message) {
    text(problem, message);
    problem.hidden = !message;
  }

  // start over with `key` (or none): nothing the last key showed stays, and a poll goes now
  function useKey(key) {
    if (key) sessionStorage.setItem(KEY_ITEM, key);
    else sessionStorage.removeItem(KEY_ITEM);
    session += 1;
    clearTimeout(timer);
    clearModels();
    showProblem("");
    signOut.hidden = !key;
    setStatus("connecting", key ? "checking the key…" : "connecting…");
    poll();
  }

  // a 401: the key, if any, is dropped and polling stops until the form is submitted
  function askForKey(message) {
    sessionStorage.removeItem(KEY_ITEM);
    session += 1;
    clearModels();
    showProblem("");
    keyNote.textContent = message;
    keyForm.hidden = false;
    signOut.hidden = true;
    keyInput.focus();
    setStatus("locked", "an API key is needed");
  }

  keyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const key = keyInput.value.trim();
    if (!PRINTABLE.test(key)) {
      keyNote.textContent = "A key is one word of printable ASCII characters.";
      return;
    }
    keyInput.value = "";
    keyForm.hidden = true;
    useKey(key);
  });

  signOut.addEventListener("click", () => {
    notice = "Signed out: the key is forgotten.";
    useKey(null);
  });

  // ---- pushed events ----------------------------------------------------------------------

  function closeEvents(card) {
    card.events?.abort.abort();
    card.events = null;
    card.el.dataset.events = "polling";
  }

  // open the model's event stream, when there is room for one and it is not waiting to
  // be tried again; it lives until it fails, ends or the key changes
  function openEvents(card, name, secret, mine, now) {
    if (card.events || now < card.retryAt || !window.ReadableStream) return;
    let open = 0;
    for (const c of cards.values()) if (c.events) open += 1;
    if (open >= MAX_STREAMS) return;
    const events = { abort: new AbortController(), live: false, lastId: card.lastId ?? null };
    card.events = events;
    followEvents(card, name, secret, mine, events).then(
      (again) => {
        if (card.events !== events) return; // closed meanwhile
        card.lastId = events.lastId;
        card.events = null;
        card.el.dataset.events = "polling";
        if (!again) card.retryAt = Date.now() + STREAM_RETRY_MS;
      },
      () => {
        if (card.events !== events) return;
        card.lastId = events.lastId;
        card.events = null;
        card.el.dataset.events = "polling";
        card.retryAt = Date.now() + STREAM_RETRY_MS; // polled meanwhile
      },
    );
  }

  // read the stream to its end; true when it ended to be opened again at once
  async function followEvents(card, name, secret, mine, events) {
    const headers = { Accept: "text/event-stream" };
    if (secret) headers.Authorization = `Bearer ${secret}`;
    if (events.lastId !== null) headers["Last-Event-ID"] = events.lastId;
    const url = `v1/models/${encodeURIComponent(name)}/events?every=${every}`;
    const r = await fetch(url, { cache: "no-store", headers, signal: events.abort.signal });
    if (!r.ok) throw new Error(`GET /${url}: HTTP ${r.status}`);
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let event = { type: "message", id: null, data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done || mine !== session) return false;
      buffer += value;
      const lines = buffer.split("\n");
      buffer = lines.pop();
      for (const raw of lines) {
        const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
        if (line === "") {
          if (event.data.length) {
            if (event.id !== null) events.lastId = event.id;
            const reason = onEvent(card, event.type, JSON.parse(event.data.join("\n")), events);
            if (reason) return reason === "lifetime";
          }
          event = { type: "message", id: null, data: [] };
        } else if (!line.startsWith(":")) {
          const at = line.indexOf(":");
          const field = at < 0 ? line : line.slice(0, at);
          const text = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
          if (field === "event") event.type = text;
          else if (field === "id") event.id = text;
          else if (field === "data") event.data.push(text);
        }
      }
    }
  }

  // one event of a model's stream; the reason when it ends the stream
  function onEvent(card, type, data, events) {
    if (type === "progress") {
      card.stats = data;
      card.fetched = Date.now();
      events.live = true;
      card.el.dataset.events = "live";
      card.el.dataset.eventVersion = String(data.version);
      renderStats(card, data);
    } else if (type === "challengers") {
      card.challengers = data;
      if (card.stats) renderStats(card, card.stats);
    } else if (type === "change" || type === "alert") {
      card.el.dataset.lastEvent = `${type} ${data.version}`; // the progress that follows draws it
    } else if (type === "end") {
      return data.reason; // deleted or revoked: the next poll says so; lifetime: resumed
    }
    return null;
  }

  // ---- polling --------------------------------------------------------------------------

  async function getJSON(url, key) {
    const headers = { Accept: "application/json" };
    if (key) headers.Authorization = `Bearer ${key}`;
    const r = await fetch(url, { cache: "no-store", headers });
    if (!r.ok) {
      const error = new Error(`GET /${url}: HTTP ${r.status}`);
      error.status = r.status;
      error.detail = await r.json().then(
        (body) => (typeof body?.detail === "string" ? body.detail : ""),
        () => "",
      );
      throw error;
    }
    return r.json();
  }

  // whether a model's stats are worth reading again: it changed, its outcomes or summary
  // are still being folded, labels are pending (they expire with time), or it is a while
  function due(card, m, now) {
    if (card.events?.live) return null; // its statistics come pushed
    const key = JSON.stringify([m.version, m.folded, m.counters]);
    const s = card.stats;
    const stale =
      !s ||
      key !== card.key ||
      s.folded < s.version ||
      s.summary_version < s.version ||
      s.pending > 0 ||
      now - card.fetched > REFRESH_MS;
    return stale ? key : null;
  }

  async function readStats(jobs, secret, mine) {
    const queue = [...jobs];
    const worker = async () => {
      for (let job = queue.shift(); job && mine === session; job = queue.shift()) {
        const { card, key, name } = job;
        try {
          const s = await getJSON(`v1/models/${encodeURIComponent(name)}/stats`, secret);
          if (mine !== session) return;
          card.stats = s;
          card.key = key;
          card.fetched = Date.now();
          await readBacktest(card, name, secret);
          if (mine !== session) return;
          card.challengers = await readChallengers(name, secret);
          if (mine !== session) return;
          renderStats(card, s);
        } catch (e) {
          if (e.status !== 404) throw e; // deleted since the listing: gone next poll
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(CONCURRENCY, queue.length) }, worker));
  }

  // the model's latest backtest, read again while it runs and every REFRESH_MS otherwise
  async function readBacktest(card, name, secret) {
    const now = Date.now();
    const fresh = now - (card.backtestRead || 0) < REFRESH_MS;
    if (card.backtest?.status !== "running" && fresh) return false;
    card.backtestRead = now;
    try {
      card.backtest = await getJSON(`v1/models/${encodeURIComponent(name)}/backtest`, secret);
    } catch (e) {
      if (e.status !== 404) throw e;
      card.backtest = null;
    }
    return true;
  }

  // the model's shadow challengers (null where the API has none to show)
  async function readChallengers(name, secret) {
    try {
      return await getJSON(`v1/models/${encodeURIComponent(name)}/challengers`, secret);
    } catch (e) {
      if (e.status !== 404) throw e;
      return null;
    }
  }

  // what a refusal other than a 401 means, in words
  function refusal(e) {
    const why = e.detail ? `: ${e.detail}` : "";
    if (e.status === 403) {
      return `This key may not read the models (HTTP 403${why}). Sign out and enter a read key.`;
    }
    return `The API answered “not found” (HTTP 404${why}): is this page served by Committee?`;
  }

  async function poll() {
    const mine = session;
    const key = apiKey();
    try {
      const { models } = await getJSON("v1/models", key);
      if (mine !== session) return; // the key changed meanwhile: its own poll draws
      syncCards(models);
      const now = Date.now();
      const jobs = [];
      const pushed = [];
      for (const m of models) {
        const card = cards.get(m.name);
        renderModel(card, m);
        const stamp = due(card, m, now);
        if (stamp !== null) jobs.push({ card, key: stamp, name: m.name });
        else if (card.events?.live) pushed.push({ card, name: m.name });
      }
      await readStats(jobs, key, mine);
      if (mine !== session) return;
      for (const { card, name } of pushed) {
        if ((await readBacktest(card, name, key)) && mine === session && card.stats) {
          renderStats(card, card.stats);
        }
      }
      if (mine !== session) return;
      await readEndpoints(models, key, mine);
      if (mine !== session) return;
      notice = "";
      showProblem("");
      setStatus("live", "live");
      text(document.getElementById("updated"), clock(new Date()));
      // the streams open once a poll went through: the page is drawn, the key accepted
      for (const m of models) openEvents(cards.get(m.name), m.name, key, mine, Date.now());
    } catch (e) {
      if (mine !== session) return;
      if (e.status === 401) {
        askForKey(key ? "Key refused: enter a valid read key." : notice);
      } else if (e.status === 403 || e.status === 404) {
        clearModels();
        showProblem(refusal(e));
        setStatus("error", `refused (HTTP ${e.status})`);
      } else {
        setStatus("error", `cannot reach the API (${e.message}); showing the last values`);
      }
    } finally {
      polls += 1;
      document.body.dataset.polls = String(polls);
      // after a 401 (or a new key) the session moved on: the form's submit polls again
      if (mine === session) timer = setTimeout(poll, every);
    }
  }

  text(document.getElementById("every"), int(every));
  signOut.hidden = !apiKey();
  poll();
})();
