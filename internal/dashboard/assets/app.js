// TideGPU dashboard: reads this admin server's /api/v1 and draws it.
// Plain JavaScript, no dependencies, no build step; works offline.
"use strict";

(function () {
  const TOKEN_KEY = "tidegpu-admin-token";
  const REFRESH_MS = 5000;
  const MAX_EVENTS = 200;

  const $ = (id) => document.getElementById(id);
  const state = {
    lastSeq: 0,
    events: [],
    needToken: false,
    liveMode: "off",
    streamAbort: null,
    refreshTimer: null,
    busy: {},
  };

  // ---- helpers ----------------------------------------------------------

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const k of kids.flat()) {
      if (k === null || k === undefined || k === false) continue;
      e.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return e;
  }
  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === "text") e.textContent = v;
      else e.setAttribute(k, String(v));
    }
    for (const k of kids.flat()) if (k) e.append(k);
    return e;
  }

  function token() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (_) { return ""; }
  }
  function headers(extra) {
    const h = Object.assign({ Accept: "application/json" }, extra || {});
    const t = token();
    if (t) h.Authorization = "Bearer " + t;
    return h;
  }

  class HTTPError extends Error {
    constructor(status, msg) { super(msg); this.status = status; }
  }

  async function api(path, opts) {
    opts = opts || {};
    const res = await fetch(path, {
      method: opts.method || "GET",
      headers: headers(opts.body ? { "Content-Type": "application/json" } : null),
      body: opts.body ? JSON.stringify(opts.body) : undefined,
      cache: "no-store",
    });
    if (res.status === 401) {
      askToken(true);
      throw new HTTPError(401, "the admin token is missing or wrong");
    }
    const text = await res.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
    if (!res.ok) {
      const msg = body && body.error ? body.error : res.status + " " + res.statusText;
      throw new HTTPError(res.status, msg);
    }
    return body;
  }

  function ago(t, now) {
    const s = Math.max(0, Math.round(((now || Date.now()) - new Date(t).getTime()) / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
    if (s < 172800) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d";
  }
  function clock(t) {
    const d = new Date(t);
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  }
  function fmt(n, digits) {
    if (n === null || n === undefined || !isFinite(n)) return "–";
    return Number(n).toLocaleString(undefined, { maximumFractionDigits: digits === undefined ? 1 : digits });
  }
  function phaseClass(p) {
    const k = String(p || "").toLowerCase();
    return ["ready", "starting", "pending", "draining", "terminating", "gone"].includes(k) ? "b-" + k : "b-other";
  }

  // notice shows a message above the page; kind names what it is about, so
  // that it can be cleared when that is fixed. Good news fades by itself.
  let noticeTimer = null;
  function notice(msg, ok, kind) {
    const n = $("notice");
    clearTimeout(noticeTimer);
    state.noticeKind = msg ? kind || "" : "";
    if (!msg) { n.hidden = true; n.textContent = ""; return; }
    n.textContent = msg;
    n.className = "notice" + (ok ? " ok" : "");
    n.setAttribute("role", ok ? "status" : "alert");
    n.hidden = false;
    if (ok) noticeTimer = setTimeout(() => notice(""), 8000);
  }

  // ---- token --------------------------------------------------------------

  function askToken(wrong) {
    if (state.needToken && !wrong) return;
    state.needToken = true;
    const f = $("token-form");
    const first = f.hidden;
    f.hidden = false;
    $("token-why").textContent = token()
      ? "The admin token kept in this tab was refused. Enter the value of TIDEGPU_ADMIN_TOKEN."
      : "This admin server wants its token (the value of TIDEGPU_ADMIN_TOKEN). It is kept in this tab only (sessionStorage).";
    if (first) $("token-input").focus();
    setLive("off", "token needed");
  }

  function setupToken() {
    $("token-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      const v = $("token-input").value.trim();
      if (!v) return;
      try { sessionStorage.setItem(TOKEN_KEY, v); } catch (_) { /* private mode */ }
      $("token-input").value = "";
      $("token-form").hidden = true;
      state.needToken = false;
      restartStream();
      refresh();
    });
    $("token-forget").addEventListener("click", () => {
      try { sessionStorage.removeItem(TOKEN_KEY); } catch (_) { /* ignore */ }
      $("token-input").value = "";
    });
  }

  // ---- pools ----------------------------------------------------------------

  // keepFocus re-renders a box and gives focus back to the control that
  // had it (same data-key), so that live updates do not throw a keyboard
  // user back to the top of the page.
  function keepFocus(box, render) {
    const a = document.activeElement;
    const key = a && box.contains(a) ? a.getAttribute("data-key") : null;
    render();
    if (key) {
      const again = box.querySelector('[data-key="' + CSS.escape(key) + '"]');
      if (again && !again.disabled) again.focus();
    }
  }

  function renderPools(pools) {
    keepFocus($("pools"), () => drawPools(pools));
  }

  function drawPools(pools) {
    const box = $("pools");
    box.replaceChildren();
    if (!pools || pools.length === 0) {
      box.append(el("p", { class: "muted", text: "No pools on this admin server." }));
      return;
    }
    const now = Date.now();
    for (const p of pools) {
      const st = p.status || {};
      const spec = p.spec || {};
      const desired = st.desired || 0;
      const ready = st.ready || 0;
      const cond = (st.conditions || []).find((c) => c.type === "Ready");
      const wrap = el("div", { class: "pool", "data-pool": p.name });
      wrap.append(el("div", { class: "pool-head" },
        el("span", { class: "pool-name" }, p.name),
        el("span", { class: "pool-count", "aria-label": ready + " of " + desired + " instances ready" },
          el("strong", { text: ready }), " / ", el("strong", { text: desired }), " ready"),
        el("span", { class: "muted" }, (spec.provider || "?") + (st.spot !== undefined ? " · " + (st.spot || 0) + " spot" : "") +
          " · min " + (spec.minimum || 0) + " max " + (spec.maximum || 0)),
        cond ? el("span", { class: "cond badge " + (cond.status === "True" ? "b-ready" : "b-warning"), title: cond.message || "" },
          cond.status === "True" ? "Ready" : "Not ready" + (cond.reason ? ": " + cond.reason : "")) : null));
      const insts = st.instances || [];
      if (insts.length === 0) {
        wrap.append(el("p", { class: "muted", text: "No instances." }));
      } else {
        const tbody = el("tbody");
        for (const in_ of insts) {
          const busy = !!state.busy[p.name + "/" + in_.id];
          const gone = in_.phase === "Terminating";
          tbody.append(el("tr", { "data-instance": in_.id },
            el("td", { class: "mono c-id" }, in_.id),
            el("td", { class: "c-phase" }, el("span", { class: "badge " + phaseClass(in_.phase) }, in_.phase || "?")),
            el("td", { class: "c-zone" }, in_.zone || "–"),
            el("td", { class: "c-market" }, in_.market || "–"),
            el("td", { class: "mono c-addr" }, in_.address || "–"),
            el("td", { class: "num c-age", title: "age" }, in_.launchedAt ? ago(in_.launchedAt, now) : "–"),
            el("td", { class: "actions" },
              el("button", {
                type: "button", class: "btn btn-warn", disabled: busy || gone,
                "data-action": "reclaim-notice", "data-key": p.name + "/" + in_.id + "/notice",
                "aria-label": "Reclaim " + in_.id + " of pool " + p.name + " with 10 seconds notice",
                onclick: () => reclaim(p.name, in_.id, 10),
              }, "Reclaim (10 s notice)"),
              el("button", {
                type: "button", class: "btn btn-danger", disabled: busy || gone,
                "data-action": "reclaim-now", "data-key": p.name + "/" + in_.id + "/now",
                "aria-label": "Reclaim " + in_.id + " of pool " + p.name + " now, with no notice",
                onclick: () => reclaim(p.name, in_.id, 0),
              }, "Reclaim now"))));
        }
        wrap.append(el("div", { class: "table-wrap" }, el("table", { class: "inst", "aria-label": "Instances of pool " + p.name },
          el("thead", {}, el("tr", {}, ["Instance", "Phase", "Zone", "Market", "Address", "Age", "Simulate reclaim"].map((h, i) =>
            el("th", { scope: "col", class: i === 5 ? "num" : null }, h)))),
          tbody)));
      }
      box.append(wrap);
    }
  }

  async function reclaim(pool, id, noticeSeconds) {
    const key = pool + "/" + id;
    state.busy[key] = true;
    document.querySelectorAll('tr[data-instance="' + CSS.escape(id) + '"] button').forEach((b) => { b.disabled = true; });
    try {
      await api("/api/v1/pools/" + encodeURIComponent(pool) + "/instances/" + encodeURIComponent(id) + "/reclaim",
        { method: "POST", body: { noticeSeconds: noticeSeconds } });
      notice("Reclaim of " + id + " requested (" + (noticeSeconds ? noticeSeconds + " s notice" : "no notice") +
        "): watch its replacement come up.", true);
    } catch (e) {
      notice("Reclaim of " + id + " failed: " + e.message);
    } finally {
      delete state.busy[key];
      scheduleRefresh(100);
    }
  }

  // ---- timeline -----------------------------------------------------------

  const SEGMENT = { launched: "starting", adopted: "ready", ready: "ready", reclaimed: "draining", draining: "draining", terminating: "terminating" };

  function renderTimeline(tl) {
    const box = $("timeline");
    box.replaceChildren();
    const pools = (tl && tl.pools) || [];
    if (pools.every((p) => !p.tracks || p.tracks.length === 0)) {
      box.append(el("p", { class: "muted", text: "No instances yet." }));
      return;
    }
    const now = new Date(tl.now).getTime();
    let start = now;
    for (const p of pools) for (const t of p.tracks || []) if (t.steps.length) start = Math.min(start, new Date(t.steps[0].at).getTime());
    // Fit the axis to what happened, between one and fifteen minutes.
    const span = fitSpan(now - start, 15 * 60e3);
    const t0 = now - span;
    const X = (t) => Math.max(0, Math.min(1000, ((t - t0) / span) * 1000));
    for (const p of pools) {
      const tracks = p.tracks || [];
      if (!tracks.length) continue;
      const sec = el("div", { class: "tl-pool" }, el("h3", {}, "pool " + p.name + " ",
        el("span", { class: "muted small" }, (p.ready || 0) + "/" + (p.desired || 0) + " ready")));
      for (const t of tracks) {
        const bar = svg("svg", { class: "tl-bar", viewBox: "0 0 1000 22", preserveAspectRatio: "none", role: "img", "aria-label": describeTrack(t) });
        bar.append(svg("rect", { class: "bg", x: 0, y: 3, width: 1000, height: 16, rx: 0 }));
        const steps = t.steps || [];
        const marks = [];
        let cur = null, from = 0;
        const end = (at) => {
          if (cur && SEGMENT[cur]) {
            const x0 = X(from), x1 = X(at);
            if (x1 > x0) bar.append(svg("rect", { class: "s-" + SEGMENT[cur], x: x0, y: 3, width: Math.max(1, x1 - x0), height: 16 }));
          }
        };
        for (const s of steps) {
          const at = new Date(s.at).getTime();
          if (s.kind === "reclaimed" || s.kind === "lost") {
            marks.push(svg("rect", { class: "m-" + s.kind, x: Math.max(0, X(at) - 3), y: 0, width: 6, height: 22 }));
          }
          if (s.kind === "gone" || s.kind === "lost") { end(at); cur = null; continue; }
          if (!SEGMENT[s.kind]) continue;
          // A draining instance stays draining until it is gone.
          if ((cur === "reclaimed" || cur === "draining") && (s.kind === "draining" || s.kind === "ready")) continue;
          end(at);
          cur = s.kind; from = at;
        }
        if (cur && t.phase !== "Gone") end(now);
        else if (cur) end(steps.length ? new Date(steps[steps.length - 1].at).getTime() : now);
        bar.append(...marks);
        const sub = [t.zone, t.market].filter(Boolean).join(" · ");
        const rel = t.replaces ? "replaces " + t.replaces : t.replacedBy ? "replaced by " + t.replacedBy : "";
        sec.append(el("div", { class: "tl-row", "data-track": t.instance },
          el("div", { class: "tl-label" },
            el("span", { class: "mono" }, t.instance), " ",
            el("span", { class: "badge " + phaseClass(t.phase) }, t.phase),
            el("span", { class: "sub" }, [sub, rel].filter(Boolean).join(" · ") || "\u00a0")),
          bar));
      }
      box.append(sec);
    }
    const labels = [];
    for (let i = 4; i >= 1; i--) labels.push(before((span * i) / 4));
    labels.push("now");
    box.append(el("div", { class: "tl-axis", "aria-hidden": "true" }, labels.map((l) => el("span", {}, l))));
  }

  // fitSpan rounds a time span up to a tidy axis length, at least 40 s
  // and at most max.
  function fitSpan(ms, max) {
    const steps = [40e3, 60e3, 120e3, 240e3, 300e3, 600e3, 900e3];
    for (const s of steps) if (ms * 1.05 <= s && s <= max) return s;
    return max;
  }
  // before labels a point of an axis that ends now: "−20s", "−4m".
  function before(ms) {
    const s = Math.round(ms / 1000);
    if (s < 120) return "−" + s + "s";
    const m = s / 60;
    return "−" + (Number.isInteger(m) ? m : m.toFixed(1)) + "m";
  }

  function describeTrack(t) {
    const parts = (t.steps || []).map((s) => s.kind + " " + clock(s.at));
    return t.instance + " (" + t.phase + "): " + (parts.join(", ") || "no events");
  }

  // ---- backends -----------------------------------------------------------

  function health(b) {
    if (b.removed) return ["removed", "b-removed"];
    if (b.draining) return ["draining", "b-draining"];
    if (b.ejected) return ["ejected", "b-ejected"];
    if (!b.healthy) return ["unhealthy", "b-unhealthy"];
    return ["healthy", "b-healthy"];
  }

  function renderBackends(bs) {
    const box = $("backends");
    box.replaceChildren();
    if (!bs || bs.length === 0) {
      box.append(el("p", { class: "muted", text: "No backends on this admin server's gateway." }));
      return;
    }
    const tbody = el("tbody");
    for (const b of bs) {
      const [h, cls] = health(b);
      tbody.append(el("tr", { "data-backend": b.id },
        el("td", {}, b.pool),
        el("td", {}, el("span", { class: "mono" }, b.id), el("span", { class: "sub mono" }, b.address)),
        el("td", {}, el("span", { class: "badge " + cls, title: b.lastError || "" }, h)),
        el("td", { class: "num" }, fmt(b.weight, 0)),
        el("td", { class: "num" }, fmt(b.inFlight, 0)),
        el("td", { class: "num" }, fmt(b.requests, 0)),
        el("td", { class: "num" }, fmt(b.failures, 0)),
        el("td", { class: "num" }, b.ewmaLatencyNs ? fmt(b.ewmaLatencyNs / 1e6, 1) : "–")));
    }
    box.append(el("div", { class: "table-wrap" }, el("table", { "aria-label": "Gateway backends" },
      el("thead", {}, el("tr", {}, ["Pool", "Backend", "Health", "Weight", "In flight", "Requests", "Failures", "EWMA ms"].map((h, i) =>
        el("th", { scope: "col", class: i >= 3 ? "num" : null }, h)))),
      tbody)));
  }

  // ---- charts ---------------------------------------------------------------

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  // lineChart draws series [{key, values:[number|null]}] over times.
  function lineChart(box, times, series, opts) {
    box.replaceChildren();
    const W = Math.max(200, Math.round(box.clientWidth || 300));
    const H = 150, L = 44, R = 8, T = 8, B = 20;
    const s = svg("svg", { viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img", "aria-label": opts.label });
    const vals = series.flatMap((x) => x.values).filter((v) => v !== null && v !== undefined && isFinite(v));
    const now = opts.now;
    const span = opts.span;
    const t0 = now - span;
    const X = (t) => L + ((t - t0) / span) * (W - L - R);
    const ymax = opts.fixedMax || niceMax(Math.max(0, ...vals) * 1.1);
    const Y = (v) => T + (1 - v / ymax) * (H - T - B);
    const lead = Math.round(ymax / Math.pow(10, Math.floor(Math.log10(ymax))) * 10) / 10;
    const ticks = lead === 2.5 || lead === 5 ? 5 : 4;
    for (let i = 0; i <= ticks; i++) {
      const v = (ymax * i) / ticks;
      s.append(svg("line", { class: "grid-line", x1: L, x2: W - R, y1: Y(v), y2: Y(v) }));
      s.append(svg("text", { class: "axis-text", x: L - 6, y: Y(v) + 4, "text-anchor": "end", text: fmt(v, v < 10 ? 2 : 0) }));
    }
    s.append(svg("text", { class: "axis-text", x: L, y: H - 5, text: before(span) }));
    s.append(svg("text", { class: "axis-text", x: W - R, y: H - 5, "text-anchor": "end", text: "now" }));
    if (vals.length === 0) {
      s.append(svg("text", { class: "empty", x: (L + W - R) / 2, y: H / 2, "text-anchor": "middle", text: opts.empty || "no data yet" }));
    }
    for (const ser of series) {
      let d = "", open = false;
      ser.values.forEach((v, i) => {
        if (v === null || v === undefined || !isFinite(v)) { open = false; return; }
        const x = X(times[i]).toFixed(1), y = Y(Math.min(v, ymax)).toFixed(1);
        d += (open ? "L" : "M") + x + " " + y;
        open = true;
      });
      if (d) s.append(svg("path", { class: "line l-" + ser.key, d: d }));
      // Mark lone points, which a path would not show.
      ser.values.forEach((v, i) => {
        const prev = ser.values[i - 1], next = ser.values[i + 1];
        if (v !== null && v !== undefined && isFinite(v) && (prev === null || prev === undefined) && (next === null || next === undefined)) {
          s.append(svg("circle", { class: "dot d-" + ser.key, cx: X(times[i]), cy: Y(Math.min(v, ymax)), r: 2.5 }));
        }
      });
    }
    box.append(s);
  }

  let lastSeries = null;
  function renderTraffic(ts) {
    lastSeries = ts;
    const pts = (ts && ts.points) || [];
    const now = ts && ts.now ? new Date(ts.now).getTime() : Date.now();
    const first = pts.length ? new Date(pts[0].t).getTime() : now;
    const win = ((ts && ts.windowSeconds) || 900) * 1000;
    const span = fitSpan(now - first, win);
    $("traffic-span").textContent = "last " + before(span).slice(1) + " (up to " + fmt(win / 60e3, 0) + " min)";
    const times = pts.map((p) => new Date(p.t).getTime());
    const empty = ts && ts.available === false ? "no gateway here" : "no traffic yet";
    const o = (label, extra) => Object.assign({ now: now, span: span, label: label, empty: empty }, extra || {});
    lineChart($("chart-rps"), times, [{ key: "rps", values: pts.map((p) => p.rps) }], o("Request rate, requests per second"));
    lineChart($("chart-err"), times, [{ key: "err", values: pts.map((p) => (p.errorRatio === null ? null : p.errorRatio * 100)) }],
      o("Error rate, percent of requests", { empty: pts.some((p) => p.rps > 0) ? "" : empty }));
    const hist = ts && ts.latency === "histogram";
    const latSeries = hist
      ? [{ key: "p50", values: pts.map((p) => p.p50Ms) }, { key: "p99", values: pts.map((p) => p.p99Ms) }]
      : [{ key: "ewma", values: pts.map((p) => p.ewmaMs) }];
    lineChart($("chart-lat"), times, latSeries, o(hist ? "Latency p50 and p99 in milliseconds" : "Latency, EWMA of the backends, milliseconds"));
    const ewma = ts && ts.latency === "ewma";
    if (hist) {
      $("chart-lat").append(el("div", { class: "chart-legend" },
        el("span", {}, el("span", { class: "k k-p50" }), "p50"), el("span", {}, el("span", { class: "k k-p99" }), "p99")));
    } else if (ewma) {
      $("chart-lat").append(el("div", { class: "chart-legend" }, el("span", {}, el("span", { class: "k k-ewma" }), "EWMA (not a percentile)")));
    }
    $("lat-caption").textContent = hist ? "Latency p50 / p99 (ms)" : ewma ? "Latency, EWMA (ms)" : "Latency (ms)";
    $("err-caption").textContent = ts && ts.source === "backend-counters" ? "Failed attempts (%)" : "Errors, 5xx (%)";
    let note = "";
    if (!ts || ts.available === false) note = "No gateway traffic is sampled on this admin server.";
    else if (hist) note = "Percentiles per " + fmt(ts.intervalSeconds, 0) + " s, estimated from the gateway's latency histogram buckets (request start to end of response, streams included).";
    else note = "Latency is the mean of the backends' moving averages to response headers (EWMA), not a percentile.";
    $("traffic-note").textContent = note;
  }

  // ---- cost -------------------------------------------------------------------

  function money(v, cur) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    try { return new Intl.NumberFormat(undefined, { style: "currency", currency: cur || "USD", maximumFractionDigits: 2 }).format(v); }
    catch (_) { return fmt(v, 2) + " " + (cur || ""); }
  }

  function renderCost(c, err) {
    const box = $("cost");
    box.replaceChildren();
    if (!c || err) {
      box.append(el("p", { class: "cost-empty muted", "data-cost": "unavailable" }, "cost: not available yet"));
      return;
    }
    const pools = c.pools || [];
    if (c.from && c.to) {
      const h = (new Date(c.to) - new Date(c.from)) / 3600e3;
      box.append(el("p", { class: "muted small" }, "Over the last " + (h >= 48 ? fmt(h / 24, 0) + " days" : fmt(h, 0) + " h") + "."));
    }
    if (!pools.length) {
      box.append(el("p", { class: "cost-empty muted" }, "No cost recorded yet."));
      return;
    }
    for (const p of pools) {
      const cur = p.currency || c.currency || "USD";
      const sec = el("div", { class: "pool", "data-cost-pool": p.name });
      sec.append(el("div", { class: "pool-head" }, el("span", { class: "pool-name" }, p.name)));
      const kv = (k, v) => el("div", { class: "kv" }, el("div", { class: "k" }, k), el("div", { class: "v" }, v));
      sec.append(el("div", { class: "cost-grid" },
        kv("Run-rate", money(p.runRatePerHour, cur) + "/h"),
        kv("Spend", money(p.spend, cur)),
        kv("Savings", money(p.savings, cur)),
        p.onDemandEquivalent !== undefined ? kv("On-demand equiv.", money(p.onDemandEquivalent, cur)) : null,
        p.idleCost !== undefined ? kv("Idle", money(p.idleCost, cur)) : null));
      const per = p.costPerMillionTokens || [];
      if (per.length) {
        sec.append(el("div", { class: "table-wrap" }, el("table", { "aria-label": "Cost per million tokens, pool " + p.name },
          el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Model"), el("th", { scope: "col" }, "Basis"), el("th", { scope: "col", class: "num" }, "$/Mtok"))),
          el("tbody", {}, per.map((x) => el("tr", {}, el("td", {}, x.model), el("td", {}, x.basis), el("td", { class: "num" }, money(x.value, cur))))))));
      }
      box.append(sec);
    }
  }

  // ---- events -------------------------------------------------------------------

  function addEvents(evs) {
    let added = false;
    for (const e of evs) {
      if (!e || typeof e.seq !== "number" || e.seq <= state.lastSeq) continue;
      state.lastSeq = e.seq;
      state.events.push(e);
      added = true;
    }
    if (!added) return false;
    if (state.events.length > MAX_EVENTS) state.events.splice(0, state.events.length - MAX_EVENTS);
    renderEvents();
    return true;
  }

  function renderEvents() {
    const list = $("events");
    const items = state.events.slice().reverse().map((e) => el("li", { "data-seq": e.seq, "data-reason": e.reason },
      el("time", { datetime: e.time }, clock(e.time)),
      el("span", { class: "badge " + (e.type === "Warning" ? "b-warning" : "b-normal") }, e.reason),
      el("span", { class: "who mono" }, e.instance || e.pool),
      el("span", { class: "msg" }, e.message)));
    list.replaceChildren(...items);
    if (!items.length) list.append(el("li", { class: "muted" }, "No events yet."));
  }

  function setLive(mode, text) {
    state.liveMode = mode;
    const l = $("live");
    l.className = "live " + (mode === "sse" ? "live-on" : mode === "poll" ? "live-poll" : "live-off");
    l.textContent = text;
    $("events-mode").textContent = mode === "sse" ? "live (server-sent events)" : mode === "poll" ? "polling every 2 s" : "";
  }

  // The stream is read with fetch so the token can go in a header
  // (EventSource cannot send one). The parser follows the event-stream
  // interpretation of https://html.spec.whatwg.org/multipage/server-sent-events.html:
  // lines end in CRLF, LF or CR; a blank line dispatches; ":" starts a
  // comment; "data" lines join with "\n"; one space after the colon goes.
  async function stream(signal) {
    const res = await fetch("/api/v1/events/stream?since=" + state.lastSeq, { headers: headers({ Accept: "text/event-stream" }), signal: signal, cache: "no-store" });
    if (res.status === 401) { askToken(true); throw new HTTPError(401, "token"); }
    if (!res.ok || !res.body || !res.body.getReader) throw new HTTPError(res.status, "no stream: " + res.status);
    setLive("sse", "live");
    state.streamOpened = true;
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = "", data = [];
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error("stream ended");
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.search(/\r\n|\r|\n/)) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(buf[i] === "\r" && buf[i + 1] === "\n" ? i + 2 : i + 1);
        if (line === "") {
          if (data.length) {
            try { if (addEvents([JSON.parse(data.join("\n"))])) scheduleRefresh(250); } catch (_) { /* skip a bad event */ }
          }
          data = [];
        } else if (line[0] !== ":") {
          const c = line.indexOf(":");
          const field = c < 0 ? line : line.slice(0, c);
          let v = c < 0 ? "" : line.slice(c + 1);
          if (v[0] === " ") v = v.slice(1);
          if (field === "data") data.push(v);
        }
      }
    }
  }

  async function pollEvents() {
    const evs = await api("/api/v1/events?since=" + state.lastSeq);
    if (addEvents(evs || [])) scheduleRefresh(250);
  }

  async function eventLoop() {
    let failures = 0;
    for (;;) {
      if (state.needToken) { await sleep(1000); continue; }
      if (failures < 3 || failures % 15 === 0) {
        const ctl = new AbortController();
        state.streamAbort = ctl;
        state.streamOpened = false;
        try {
          await stream(ctl.signal);
        } catch (e) {
          failures = state.streamOpened ? 1 : failures + 1;
          if (e && e.status === 404) {
            // This admin server keeps no event log (a standalone gateway).
            setLive("off", "no event log here");
            await sleep(30000);
            continue;
          }
        }
        state.streamAbort = null;
        if (state.needToken) continue;
      } else {
        failures++;
      }
      // Fall back to short polling between stream attempts.
      setLive("poll", "polling");
      try { await pollEvents(); } catch (_) { if (!state.needToken) setLive("off", "admin API unreachable"); }
      await sleep(2000);
    }
  }
  function restartStream() {
    if (state.streamAbort) state.streamAbort.abort();
  }
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // ---- refresh -------------------------------------------------------------------

  function scheduleRefresh(ms) {
    clearTimeout(state.refreshTimer);
    state.refreshTimer = setTimeout(refresh, ms);
  }

  let refreshing = false;
  async function refresh() {
    clearTimeout(state.refreshTimer);
    if (refreshing) { scheduleRefresh(300); return; }
    refreshing = true;
    try {
      const [pools, tl, bs, ts, cost] = await Promise.allSettled([
        api("/api/v1/pools"), api("/api/v1/timeline"), api("/api/v1/backends"), api("/api/v1/timeseries"), api("/api/v1/cost"),
      ]);
      if (pools.status === "fulfilled") {
        renderPools(pools.value);
        if (state.noticeKind === "pools") notice("");
      } else if (pools.reason && pools.reason.status === 404) {
        $("pools").replaceChildren(el("p", { class: "muted", text: "No pools on this admin server (it runs no pool engine)." }));
      } else if (pools.reason && pools.reason.status !== 401) {
        notice("Cannot read pools: " + pools.reason.message, false, "pools");
      }
      if (tl.status === "fulfilled") renderTimeline(tl.value);
      else if (tl.reason && tl.reason.status === 404) $("timeline").replaceChildren(el("p", { class: "muted", text: "No timeline on this admin server." }));
      if (bs.status === "fulfilled") renderBackends(bs.value);
      else if (bs.reason && bs.reason.status === 404) renderBackends([]);
      if (ts.status === "fulfilled") renderTraffic(ts.value);
      else if (ts.reason && ts.reason.status === 404) renderTraffic({ available: false, points: [] });
      renderCost(cost.status === "fulfilled" ? cost.value : null, cost.status !== "fulfilled");
      if ([pools, tl, bs, ts].some((r) => r.status === "fulfilled")) $("updated").textContent = "updated " + clock(Date.now());
    } finally {
      refreshing = false;
      state.refreshTimer = setTimeout(refresh, REFRESH_MS);
    }
  }

  let resizeTimer = null;
  window.addEventListener("resize", () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { if (lastSeries) renderTraffic(lastSeries); }, 150);
  });

  document.addEventListener("DOMContentLoaded", () => {
    setupToken();
    renderEvents();
    refresh();
    eventLoop();
  });
})();
