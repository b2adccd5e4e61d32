// Tandem console: polls the admin listener's JSON endpoints and draws them.
// Everything the server sends is put into the page with textContent, never
// as markup. The admin token, when the operator enters one, goes in an
// Authorization header, never a cookie, and only where it is needed: with
// every POST, and with reads only where the listener can need it for them
// (HTTPS, or a plaintext listener off loopback). On a plaintext loopback
// listener, whose port any local user can take once the coordinator stops,
// reads are open, so polls never carry it, and the page keeps it in memory
// only: a page served later on the same origin (by whatever then listens
// there) finds nothing in this tab's storage. Over HTTPS (the certificate
// proves who answers) it is kept in the tab's sessionStorage.
"use strict";
(function () {
  var TOKEN_KEY = "tandem.adminToken";
  var POLL_MS = 1000;
  var KEEP = 300; // samples kept in the page (the server's ring holds as many)
  var TOP_EVENTS = 6;
  var COLORS = ["#1565c0", "#e65100", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#9e9d24", "#5d4037", "#ad1457", "#455a64", "#f9a825", "#283593"];

  var samples = [];
  var lastT = 0;
  var role = "";
  var hasStandby = false;
  var charts = {};
  var waitKeys = "";
  var selected = null; // {side, event} of the histogram shown
  var ticks = 0;

  function $(id) { return document.getElementById(id); }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  var SECURE = location.protocol === "https:";
  function loopbackName(h) { return h === "localhost" || h === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(h); }
  // READS_NEED_TOKEN: the listener may refuse a read without a token (off
  // loopback without mutual TLS); over HTTPS the token is safe to send anyway.
  var READS_NEED_TOKEN = SECURE || !loopbackName(location.hostname);
  var memToken = ""; // the token where it is not kept in sessionStorage

  function token() {
    if (!SECURE) return memToken;
    try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch (e) { return ""; }
  }
  function setToken(v) {
    memToken = SECURE ? "" : v;
    try { if (SECURE && v) sessionStorage.setItem(TOKEN_KEY, v); else sessionStorage.removeItem(TOKEN_KEY); } catch (e) { if (SECURE && v) showError("cannot keep the token: " + e); }
  }

  // api fetches path from this listener; the token, if any, goes in the
  // Authorization header of a POST, and of a read where the listener may
  // need it (READS_NEED_TOKEN). It resolves to {status, body} and never
  // throws for an HTTP error.
  function api(path, method) {
    var h = { "Accept": "application/json" };
    var t = token();
    if (t && (READS_NEED_TOKEN || (method && method !== "GET"))) h["Authorization"] = "Bearer " + t;
    return fetch(path, { method: method || "GET", headers: h, cache: "no-store", credentials: "omit" }).then(function (r) {
      return r.text().then(function (text) {
        var body = null;
        try { body = JSON.parse(text); } catch (e) { body = text; }
        return { status: r.status, body: body };
      });
    });
  }

  // ---- formatting ----
  function fmtNum(v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    if (Math.abs(v) >= 100 || digits === 0) return Math.round(v).toLocaleString();
    return v.toFixed(digits === undefined ? 1 : digits);
  }
  function fmtBytes(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(v) >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(Math.round(v)) : v.toFixed(1)) + " " + u[i];
  }
  function fmtSecs(v) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    if (v === 0) return "0";
    if (v < 1e-3) return (v * 1e6).toFixed(0) + " µs";
    if (v < 1) return (v * 1e3).toFixed(v < 0.01 ? 2 : 1) + " ms";
    if (v < 120) return v.toFixed(1) + " s";
    if (v < 7200) return (v / 60).toFixed(1) + " min";
    return (v / 3600).toFixed(1) + " h";
  }

  // ---- charts ----
  function chartWidth(id) { return Math.max(300, $(id).clientWidth - 4); }

  function makeChart(id, opts, data) {
    if (charts[id]) { charts[id].destroy(); }
    opts.width = chartWidth(id);
    opts.height = opts.height || 180;
    var u = new uPlot(opts, data, $(id));
    charts[id] = u;
    $(id).setAttribute("data-drawn", "1");
    return u;
  }

  function pad2(n) { return (n < 10 ? "0" : "") + n; }
  function clock(t) { var d = new Date(t * 1000); return pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + ":" + pad2(d.getSeconds()); }

  // xAxis: wall-clock time, ticks at whole seconds or more.
  function xAxis() {
    return { space: 70, incrs: [1, 2, 5, 10, 15, 30, 60, 120, 300, 600], values: function (u, vals) { return vals.map(clock); } };
  }

  // fitLabels is a vertical axis's size (uPlot's axis.size): room for its
  // widest tick label, measured in the axis's own font, beside its tick and
  // gap, so that no label is cut at the chart's edge ("100.0 ms", not
  // "00.0 ms"; "12,000", not "2,000"). After the first layout cycle it keeps
  // the size it gave, as uPlot's own autosize example does, so that the
  // layout settles.
  function fitLabels(u, values, axisIdx, cycleNum) {
    var a = u.axes[axisIdx];
    if (cycleNum > 1 && a._size) return a._size;
    var w = 0;
    if (values) {
      u.ctx.font = a.font[0]; // in device pixels
      values.forEach(function (v) { if (v !== null && v !== undefined) w = Math.max(w, u.ctx.measureText(String(v)).width); });
      w /= uPlot.pxRatio || window.devicePixelRatio || 1;
    }
    return Math.max(30, Math.ceil(w + (a.ticks.show ? a.ticks.size : 0) + a.gap + 2));
  }

  // timeSeries: the options of a chart over time; every y axis sized by
  // fitLabels.
  function timeSeries(title, series, scales, axes) {
    axes = axes || [{}, {}];
    axes[0] = xAxis();
    for (var i = 1; i < axes.length; i++) axes[i].size = fitLabels;
    return {
      title: title,
      scales: Object.assign({ x: { time: true } }, scales || {}),
      series: [{ label: "time", value: function (u, v) { return v === null || v === undefined ? "–" : clock(v); } }].concat(series),
      axes: axes,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } }
    };
  }

  function col(name) { return samples.map(function (s) { return s[name] === undefined ? null : s[name]; }); }
  function xs() { return samples.map(function (s) { return s.t / 1000; }); }

  // avg is the mean of a column over the last n samples (nulls skipped).
  function avg(name, n) {
    var vs = samples.slice(-n).map(function (s) { return s[name]; }).filter(function (v) { return v !== null && v !== undefined; });
    return vs.length ? vs.reduce(function (a, b) { return a + b; }, 0) / vs.length : null;
  }

  function drawThroughput() {
    $("throughput-now").textContent = "last 5 s: " + fmtNum(avg("cp_commits", 5)) + " commit-point commits/s (decision tables), " +
      fmtNum(avg("commits", 5)) + " coordinator commits/s, " + fmtNum(avg("aborts", 5)) + " aborts/s, " +
      fmtNum(avg("local_commits", 5)) + " one-phase/local commits/s";
    var data = [xs(), col("cp_commits"), col("commits"), col("aborts"), col("local_commits"), col("refused"), col("cp_aborts")];
    if (!charts["c-throughput"]) {
      makeChart("c-throughput", timeSeries("", [
        { label: "commit-point commits/s", stroke: COLORS[3], width: 2, value: function (u, v) { return fmtNum(v); } },
        { label: "coordinator commits/s", stroke: COLORS[2], width: 2, value: function (u, v) { return fmtNum(v); } },
        { label: "aborts/s", stroke: COLORS[4], value: function (u, v) { return fmtNum(v); } },
        { label: "one-phase/local commits/s (SDK here)", stroke: COLORS[0], value: function (u, v) { return fmtNum(v); } },
        { label: "refused/s", stroke: COLORS[1], value: function (u, v) { return fmtNum(v); } },
        { label: "commit-point aborts/s (recoverers)", stroke: COLORS[5 % COLORS.length], value: function (u, v) { return fmtNum(v); } }
      ]), data);
    } else charts["c-throughput"].setData(data);
  }

  function drawLatency() {
    var last = samples.length ? samples[samples.length - 1] : {};
    var has = function (v) { return v !== null && v !== undefined; };
    var parts = [];
    if (has(last.commit_p50_s)) parts.push("coordinator p50 " + fmtSecs(last.commit_p50_s) + ", p99 " + fmtSecs(last.commit_p99_s));
    if (has(last.cp_p50_s)) parts.push("commit point (begin → decision) p50 " + fmtSecs(last.cp_p50_s) + ", p99 " + fmtSecs(last.cp_p99_s));
    $("latency-now").textContent = parts.length ? "last interval: " + parts.join("; ") : "no commits in the last interval";
    var ms = function (name) { return col(name).map(function (v) { return v === null ? null : v * 1000; }); };
    var data = [xs(), ms("commit_p50_s"), ms("commit_p99_s"), ms("cp_p50_s"), ms("cp_p99_s")];
    var fmt = function (u, v) { return v === null ? "–" : fmtSecs(v / 1000); };
    if (!charts["c-latency"]) {
      makeChart("c-latency", timeSeries("", [
        { label: "coordinator p50 ms", stroke: COLORS[0], width: 2, spanGaps: false, value: fmt },
        { label: "coordinator p99 ms", stroke: COLORS[1], width: 2, spanGaps: false, value: fmt },
        { label: "commit point p50 ms", stroke: COLORS[3], width: 2, spanGaps: false, value: fmt },
        { label: "commit point p99 ms", stroke: COLORS[4], width: 2, spanGaps: false, value: fmt }
      ]), data);
    } else charts["c-latency"].setData(data);
  }

  // Wait events: the TOP_EVENTS events of the most time waited over the
  // samples shown, stacked (each band is one event), the rest as "other".
  function waitKey(w) { return w.event === "other" && !w.side ? "other" : w.side + ": " + w.event; }

  function drawWaits() {
    var totals = {};
    samples.forEach(function (s) {
      (s.waits || []).forEach(function (w) {
        var k = waitKey(w);
        totals[k] = (totals[k] || 0) + w.s;
      });
    });
    var keys = Object.keys(totals).filter(function (k) { return k !== "other"; }).sort(function (a, b) { return totals[b] - totals[a]; });
    var top = keys.slice(0, TOP_EVENTS);
    var restKeys = keys.length > TOP_EVENTS || totals.other ? ["other"] : [];
    var shown = top.concat(restKeys);
    var raw = shown.map(function () { return []; });
    samples.forEach(function (s, i) {
      shown.forEach(function (_, j) { raw[j][i] = 0; });
      (s.waits || []).forEach(function (w) {
        var k = waitKey(w);
        var j = top.indexOf(k);
        if (j < 0) j = restKeys.length ? shown.length - 1 : -1;
        if (j >= 0) raw[j][i] += w.s / (s.interval_s || 1);
      });
    });
    // Stack: band j is drawn as the cumulative sum of bands 0..j; drawn
    // from the top down so that each band keeps its own colour.
    var cum = [];
    for (var j = 0; j < shown.length; j++) {
      cum[j] = raw[j].map(function (v, i) { return v + (j > 0 ? cum[j - 1][i] : 0); });
    }
    var order = shown.map(function (_, j) { return shown.length - 1 - j; });
    var data = [xs()].concat(order.map(function (j) { return cum[j]; }));
    var sig = shown.join("|");
    if (sig !== waitKeys || !charts["c-waits"]) {
      waitKeys = sig;
      var series = order.map(function (j) {
        var c = shown[j] === "other" ? "#9e9e9e" : COLORS[j % COLORS.length];
        return {
          label: shown[j], stroke: c, fill: c + "cc", width: 1, points: { show: false },
          value: function (u, v, si, idx) { return idx === null || idx === undefined ? "–" : fmtSecs(raw[j][idx]) + "/s"; }
        };
      });
      makeChart("c-waits", timeSeries("", series, { y: { range: function (u, min, max) { return [0, Math.max(max, 1e-3)]; } } },
        [{}, { values: function (u, vals) { return vals.map(function (v) { return fmtSecs(v); }); } }]), data);
      charts["c-waits"].root.querySelector(".u-legend").classList.add("waits-legend");
    } else charts["c-waits"].setData(data);
    drawWaitTable(shown);
  }

  function drawWaitTable(shown) {
    var body = $("t-waits").querySelector("tbody");
    clear(body);
    var last = samples.length ? samples[samples.length - 1] : null;
    var ws = last ? (last.waits || []) : [];
    if (!ws.length) {
      var tr = el("tr"); var td = el("td", "no waits in the last interval", "muted"); td.colSpan = 5; tr.appendChild(td); body.appendChild(tr);
      return;
    }
    ws.forEach(function (w) {
      var tr = el("tr");
      var k = waitKey(w);
      var j = shown.indexOf(k);
      var name = el("td");
      var sw = el("span", null, "swatch");
      sw.style.background = j < 0 ? "transparent" : (k === "other" ? "#9e9e9e" : COLORS[j % COLORS.length]);
      name.appendChild(sw);
      name.appendChild(document.createTextNode(w.event));
      tr.appendChild(name);
      tr.appendChild(el("td", w.side || "–"));
      tr.appendChild(el("td", fmtSecs(w.s), "num"));
      tr.appendChild(el("td", fmtNum(w.n, 0), "num"));
      tr.appendChild(el("td", w.n ? fmtSecs(w.s / w.n) : "–", "num"));
      if (selected && selected.side === w.side && selected.event === w.event) tr.className = "sel";
      if (w.side) {
        tr.title = "click: the latency histogram of " + w.event;
        tr.addEventListener("click", function () { showHistogram(w.side, w.event); });
      }
      body.appendChild(tr);
    });
  }

  // showHistogram draws the latency histogram of one event since the
  // coordinator started, from /waits?buckets=1.
  function showHistogram(side, event) {
    selected = { side: side, event: event };
    api("/waits?buckets=1").then(function (r) {
      if (r.status !== 200 || !r.body || !r.body[side]) { showError("/waits: " + r.status); return; }
      var snap = r.body[side];
      var ev = (snap.events || []).filter(function (e) { return e.event === event; })[0];
      $("histo").hidden = false;
      $("histo-title").textContent = side + ": " + event + " — latency histogram since start" + (ev ? " (" + fmtNum(ev.count, 0) + " waits, max " + fmtSecs(ev.max_s) + ")" : ": no waits");
      if (!ev || !ev.buckets) return;
      var les = snap.buckets_le_s || [];
      var first = ev.buckets.findIndex(function (n) { return n > 0; });
      var lastI = ev.buckets.length - 1;
      while (lastI > 0 && !ev.buckets[lastI]) lastI--;
      first = Math.max(0, first - 1); lastI = Math.min(ev.buckets.length - 1, lastI + 1);
      var x = [], y = [];
      for (var i = first; i <= lastI; i++) { x.push(i); y.push(ev.buckets[i]); }
      makeChart("c-histo", {
        height: 160,
        scales: { x: { time: false, range: [first - 0.5, lastI + 0.5] } },
        series: [{ value: function (u, v) { return v === null ? "–" : "≤ " + leLabel(les, v); } },
          { label: "waits", fill: COLORS[0] + "aa", stroke: COLORS[0], paths: uPlot.paths.bars({ size: [0.8] }), points: { show: false } }],
        axes: [{ values: function (u, vals) { return vals.map(function (v) { return Number.isInteger(v) ? leLabel(les, v) : ""; }); }, space: 50 }, { size: fitLabels }],
        cursor: { drag: { x: false, y: false } }
      }, [x, y]);
      drawWaits();
    }).catch(function (e) { showError("/waits: " + e); });
  }
  function leLabel(les, i) { var v = les[i]; return v ? fmtSecs(v) : "+Inf"; }

  // Decision tables: each RM's rows as the coordinator last read them.
  function drawTables() {
    var last = samples.length ? samples[samples.length - 1] : null;
    var body = $("t-tables").querySelector("tbody");
    clear(body);
    var ts = last ? (last.decision_tables || []) : [];
    if (!ts.length) {
      var tr0 = el("tr"); var td0 = el("td", "no decision table read (a standby, or no resource manager)", "muted"); td0.colSpan = 8; tr0.appendChild(td0); body.appendChild(tr0);
      return;
    }
    ts.forEach(function (t) {
      var tr = el("tr");
      tr.appendChild(el("td", t.rm));
      if (t.error) {
        var td = el("td", t.error, "err"); td.colSpan = 7; tr.appendChild(td); body.appendChild(tr);
        return;
      }
      tr.appendChild(el("td", fmtNum(t.commits), "num"));
      tr.appendChild(el("td", fmtNum(t.aborts), "num"));
      tr.appendChild(el("td", fmtNum(t.c_rows, 0), "num"));
      tr.appendChild(el("td", fmtNum(t.a_rows, 0), "num"));
      tr.appendChild(el("td", t.c_rows ? fmtSecs(t.oldest_c_s) : "–", "num"));
      var kept = el("td", fmtNum(t.c_kept, 0), "num");
      if (t.c_kept > 0) kept.title = "'C' rows older than 30 s: a participant still holds its branch prepared, or the client died before forgetting them; the coordinator's sweep collects them";
      tr.appendChild(kept);
      body.appendChild(tr);
    });
  }

  function drawLog() {
    var last = samples.length ? samples[samples.length - 1] : null;
    var kv = $("log-now");
    clear(kv);
    if (!last) {
      kv.appendChild(el("span", "waiting for the first sample (one a second)…", "muted"));
      return;
    }
    if (last.log_used === null || last.log_used === undefined) {
      kv.appendChild(el("span", "no decision log here (a standby decides nothing)", "muted"));
      return;
    }
    var pct = last.log_limit ? 100 * last.log_used / last.log_limit : null;
    addKV(kv, "space used", fmtBytes(last.log_used) + (last.log_limit ? " of " + fmtBytes(last.log_limit) + " (" + pct.toFixed(1) + " %)" : " (unbounded)"),
      pct === null ? "" : pct >= 90 ? "bad" : pct >= 80 ? "warn" : "good");
    addKV(kv, "fsyncs/s", fmtNum(last.fsyncs));
    addKV(kv, "records/fsync", fmtNum(last.records_per_fsync, 2));
    addKV(kv, "phase-2 backlog", fmtNum(last.phase2_backlog, 0), last.phase2_backlog > 0 ? "warn" : "");
    var used = samples.map(function (s) { return s.log_limit ? 100 * s.log_used / s.log_limit : null; });
    var data = [xs(), used, samples.map(function () { return 80; }), samples.map(function () { return 90; })];
    if (!charts["c-logspace"]) {
      makeChart("c-logspace", timeSeries("space used, % of the log", [
        { label: "used %", stroke: COLORS[0], fill: COLORS[0] + "33", width: 2, value: function (u, v) { return fmtNum(v, 1); } },
        { label: "throttle 80 %", stroke: "#b26a00", dash: [6, 4], width: 1, points: { show: false } },
        { label: "refusal 90 %", stroke: "#c62828", dash: [6, 4], width: 1, points: { show: false } }
      ], { y: { range: [0, 100] } }), data);
    } else charts["c-logspace"].setData(data);
    var fdata = [xs(), col("fsyncs"), col("records_per_fsync")];
    if (!charts["c-fsync"]) {
      makeChart("c-fsync", timeSeries("fsyncs/s and records per fsync", [
        { label: "fsyncs/s", stroke: COLORS[3], width: 2, scale: "y", value: function (u, v) { return fmtNum(v); } },
        { label: "records/fsync", stroke: COLORS[5], width: 2, scale: "r", value: function (u, v) { return fmtNum(v, 2); } }
      ], { r: { range: function (u, min, max) { return [0, Math.max(1, max)]; } } }, [{}, {}, { scale: "r", side: 1, grid: { show: false } }]), fdata);
    } else charts["c-fsync"].setData(fdata);
  }

  function addKV(kv, k, v, cls) {
    kv.appendChild(el("span", k, "k"));
    kv.appendChild(el("span", v, "v" + (cls ? " " + cls : "")));
  }

  function drawStandby(st) {
    var kv = $("standby-now");
    var panel = $("p-standby");
    clear(kv);
    if (!st) {
      panel.classList.remove("alarm");
      kv.appendChild(el("span", "no standby role (start with --standby-listen or --standby-of)", "muted"));
      return;
    }
    var alarm = false;
    addKV(kv, "role", st.role);
    addKV(kv, "epoch", st.epoch);
    if (st.role === "primary") {
      var sync = st.transport === "sync";
      alarm = !st.connected || (sync && !st.protected);
      addKV(kv, "transport", st.transport);
      addKV(kv, "protection", st.protection);
      addKV(kv, "protected", sync ? (st.protected ? "yes" : "NO: UNPROTECTED") : "no (not synchronous: a failover loses the exposure)", sync ? (st.protected ? "good" : "bad") : "warn");
      addKV(kv, "standby", st.connected ? (st.standby || "connected") : "NONE CONNECTED", st.connected ? "good" : "bad");
      addKV(kv, "lag", fmtBytes(st.lag_bytes) + " / " + fmtSecs(st.lag_seconds));
      addKV(kv, "exposure", fmtNum(st.lag_records, 0) + " records", st.lag_records > 0 ? "warn" : "");
    } else if (st.role === "standby") {
      alarm = !st.connected;
      addKV(kv, "primary", (st.standby || "–") + (st.connected ? "" : " (NOT CONNECTED)"), st.connected ? "good" : "bad");
      addKV(kv, "synchronized", st.synchronized ? "yes" : "NO (promote needs --accept-data-loss)", st.synchronized ? "good" : "bad");
      addKV(kv, "at", st.standby_at);
    } else {
      alarm = true;
    }
    addKV(kv, "cluster", st.cluster);
    panel.classList.toggle("alarm", alarm);
    var data = [xs(), col("lag_bytes"), col("lag_s")];
    if (!charts["c-lag"]) {
      makeChart("c-lag", timeSeries("lag", [
        { label: "bytes", stroke: COLORS[1], width: 2, scale: "y", value: function (u, v) { return fmtBytes(v); } },
        { label: "seconds", stroke: COLORS[0], width: 2, scale: "s", value: function (u, v) { return fmtSecs(v); } }
      ], { s: { range: function (u, min, max) { return [0, Math.max(0.001, max)]; } } },
      [{}, { values: function (u, vals) { return vals.map(fmtBytes); } }, { scale: "s", side: 1, grid: { show: false }, values: function (u, vals) { return vals.map(fmtSecs); } }]), data);
    } else charts["c-lag"].setData(data);
  }

  function drawUnfinished(d) {
    var ib = $("t-indoubt").querySelector("tbody");
    clear(ib);
    $("indoubt-count").textContent = "(" + d.in_doubt_total + " branches)";
    var now = Date.now();
    if (!d.in_doubt.length) { var tr0 = el("tr"); var td0 = el("td", "none", "muted"); td0.colSpan = 7; tr0.appendChild(td0); ib.appendChild(tr0); }
    var seen = {};
    d.in_doubt.forEach(function (b) {
      var tr = el("tr");
      tr.appendChild(el("td", b.gtrid));
      tr.appendChild(el("td", b.rm));
      var ow = el("td", b.owner_short || "-");
      if (b.owner) ow.title = b.owner;
      tr.appendChild(ow);
      tr.appendChild(el("td", b.why || "began before an unsynchronized promotion"));
      tr.appendChild(el("td", b.age_seconds === undefined ? "" : fmtSecs(b.age_seconds), "num"));
      tr.appendChild(el("td", fmtSecs((now - Date.parse(b.first_seen)) / 1000), "num"));
      var td = el("td");
      if (!seen[b.gtrid]) {
        seen[b.gtrid] = true;
        var btn = el("button", "Resolve…");
        btn.type = "button";
        if (!token()) { btn.disabled = true; btn.title = "enter the admin token above to resolve"; }
        btn.addEventListener("click", function () { openResolve(b.gtrid); });
        td.appendChild(btn);
      }
      tr.appendChild(td);
      ib.appendChild(tr);
    });
    var ub = $("t-unfinished").querySelector("tbody");
    clear(ub);
    $("unfinished-count").textContent = "(" + d.unfinished_total + (d.unfinished_total > d.unfinished.length ? ", the oldest " + d.unfinished.length + " shown" : "") + ")";
    if (!d.unfinished.length) { var tr1 = el("tr"); var td1 = el("td", "none", "muted"); td1.colSpan = 6; tr1.appendChild(td1); ub.appendChild(tr1); }
    d.unfinished.forEach(function (t) {
      var tr = el("tr");
      tr.appendChild(el("td", t.gtrid));
      tr.appendChild(el("td", t.outcome));
      tr.appendChild(el("td", fmtSecs(t.age_s), "num"));
      tr.appendChild(el("td", (t.branches || []).map(function (b) { return b.rm; }).join(", ")));
      var pending = (t.branches || []).filter(function (b) { return b.state === "pending"; });
      tr.appendChild(el("td", pending.map(function (b) { return b.rm + " (" + b.attempts + " attempts" + (b.client_settles ? ", client settles" : "") + ")"; }).join(", ") || "–"));
      tr.appendChild(el("td", pending.map(function (b) { return b.last_error ? b.rm + ": " + b.last_error : ""; }).filter(Boolean).join("; ") || "–", "err"));
      ub.appendChild(tr);
    });
  }

  // ---- resolve ----
  var resolving = "";
  function openResolve(gtrid) {
    resolving = gtrid;
    $("resolve-gtrid").textContent = gtrid;
    $("resolve-msg").textContent = "asking every resource manager…";
    var hb = $("t-holdings").querySelector("tbody");
    clear(hb);
    $("resolve-commit").disabled = true;
    $("resolve-abort").disabled = true;
    $("resolve").showModal();
    api("/in-doubt?gtrid=" + encodeURIComponent(gtrid)).then(function (r) {
      if (gtrid !== resolving) return;
      if (r.status !== 200 || !r.body || typeof r.body !== "object") { $("resolve-msg").textContent = "could not read what the RMs hold (" + r.status + "): " + String(r.body).slice(0, 300); return; }
      var held = r.body.prepared || {};
      Object.keys(held).sort().forEach(function (rm) {
        var tr = el("tr");
        tr.appendChild(el("td", rm));
        tr.appendChild(el("td", held[rm] ? "PREPARED" : "not prepared (committed, rolled back, or never prepared there: look at its data)", held[rm] ? "v warn" : "v"));
        hb.appendChild(tr);
      });
      $("resolve-msg").textContent = "";
      $("resolve-commit").disabled = false;
      $("resolve-abort").disabled = false;
    }).catch(function (e) { $("resolve-msg").textContent = String(e); });
  }
  function doResolve(outcome) {
    var gtrid = resolving;
    $("resolve-commit").disabled = true;
    $("resolve-abort").disabled = true;
    $("resolve-msg").textContent = "deciding " + outcome + "…";
    api("/in-doubt/resolve?gtrid=" + encodeURIComponent(gtrid) + "&outcome=" + outcome, "POST").then(function (r) {
      if (r.status === 200 && r.body && typeof r.body === "object") {
        $("resolve-msg").textContent = "decided " + r.body.outcome + " for " + gtrid + (r.body.phase2_pending ? " (phase 2 pending: the coordinator keeps settling)" : "");
      } else {
        $("resolve-msg").textContent = "not resolved (" + r.status + "): " + String(typeof r.body === "string" ? r.body : JSON.stringify(r.body)).slice(0, 500);
      }
      pollUnfinished();
    }).catch(function (e) { $("resolve-msg").textContent = String(e); });
  }

  // ---- polling ----
  function showError(msg) {
    var e = $("error");
    if (!msg) { e.hidden = true; e.textContent = ""; return; }
    e.hidden = false;
    e.textContent = msg;
  }
  function authHint(r, what) {
    if (r.status === 401 && !READS_NEED_TOKEN) return what + ": this listener needs a token for reads (it listens off loopback too): open the console at its network address, over HTTPS, and enter the admin token there";
    if (r.status === 401) return what + ": this listener needs a token for reads: enter the admin token above";
    if (r.status === 403) return what + ": refused (403): " + String(r.body).slice(0, 200);
    return what + ": HTTP " + r.status;
  }

  function pollData() {
    return api("/console/data" + (lastT ? "?since=" + lastT : "")).then(function (r) {
      if (r.status !== 200) { showError(authHint(r, "/console/data")); return false; }
      var d = r.body;
      role = d.role;
      hasStandby = d.standby;
      (d.samples || []).forEach(function (s) { if (s.t > lastT) { samples.push(s); lastT = s.t; } });
      if (samples.length > KEEP) samples.splice(0, samples.length - KEEP);
      var b = $("role");
      b.textContent = role;
      b.className = "badge " + (role === "primary" ? "primary" : role === "standby" ? "standby" : "bad");
      $("updated").textContent = "updated " + new Date().toLocaleTimeString() + " · " + samples.length + " samples";
      showError("");
      drawThroughput();
      drawTables();
      drawLatency();
      drawWaits();
      drawLog();
      return true;
    });
  }
  function pollStandby() {
    if (!hasStandby) { drawStandby(null); return Promise.resolve(); }
    return api("/standby").then(function (r) {
      if (r.status === 200) drawStandby(r.body); else showError(authHint(r, "/standby"));
    });
  }
  function pollUnfinished() {
    return api("/unfinished?limit=50").then(function (r) {
      if (r.status === 200) drawUnfinished(r.body); else showError(authHint(r, "/unfinished"));
    });
  }
  function tick() {
    ticks++;
    pollData().then(function (ok) {
      if (!ok) return;
      var p = [pollStandby()];
      if (ticks % 2 === 1) p.push(pollUnfinished());
      return Promise.all(p);
    }).catch(function (e) {
      showError("the coordinator does not answer: " + e);
    }).then(function () { setTimeout(tick, POLL_MS); });
  }

  // ---- token ----
  function showTokenState() {
    $("tokenstate").textContent = !token() ? "no token: read-only" : SECURE ? "token set for this tab" : "token set for this tab (until it reloads)";
  }
  $("tokenform").addEventListener("submit", function (ev) {
    ev.preventDefault();
    var v = $("token").value.trim();
    if (v) setToken(v);
    $("token").value = "";
    showTokenState();
    pollUnfinished();
  });
  $("tokenclear").addEventListener("click", function () {
    setToken("");
    showTokenState();
    pollUnfinished();
  });
  $("resolve-commit").addEventListener("click", function () { doResolve("commit"); });
  $("resolve-abort").addEventListener("click", function () { doResolve("abort"); });
  $("resolve-cancel").addEventListener("click", function () { resolving = ""; $("resolve").close(); });

  if (window.ResizeObserver) {
    var ro = new ResizeObserver(function () {
      Object.keys(charts).forEach(function (id) { charts[id].setSize({ width: chartWidth(id), height: charts[id].height }); });
    });
    ro.observe(document.querySelector("main"));
  }
  if (!SECURE) setToken(""); // drop a token an earlier version of the page kept here
  showTokenState();
  tick();
})();
