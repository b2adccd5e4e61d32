// Draws the charts of a tandem-bench --html page from its JSON block.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("tandem-bench-data").textContent);
  var colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];
  var drawn = 0;
  (data.charts || []).forEach(function (c) {
    var el = null;
    document.querySelectorAll("[data-chart]").forEach(function (e) {
      if (e.getAttribute("data-chart") === c.id) { el = e; }
    });
    if (!el) { return; }
    if (!c.data || !c.data[0] || c.data[0].length === 0) {
      el.textContent = "no data";
      return;
    }
    var series = [{ label: c.x_label }];
    c.series.forEach(function (name, i) {
      var col = colors[i % colors.length];
      if (c.dashed && c.dashed[i]) {
        series.push({ label: name, stroke: "#777", width: 1.5, dash: [6, 4], points: { show: false } });
      } else {
        series.push({ label: name, stroke: col, width: 2, spanGaps: true, points: { show: true, size: 6, fill: col } });
      }
    });
    var x = { time: false }, y = {};
    if (c.x_log) { x.distr = 3; x.log = c.x_log; }
    if (c.y_log) { y.distr = 3; y.log = c.y_log; }
    var opts = {
      width: Math.max(320, el.clientWidth || 600),
      height: 280,
      legend: { live: false },
      scales: { x: x, y: y },
      axes: [{ label: c.x_label }, { label: c.y_label, size: 70 }],
      series: series
    };
    new uPlot(opts, c.data, el);
    drawn++;
  });
  document.body.setAttribute("data-charts-drawn", String(drawn));
})();
