// vnetbench's flame graph: a self-contained SVG renderer for folded stacks (no library, no network).
// Data: a tree of [name, samples, mechanism index, children]. Click a frame to zoom into it, "reset" to go back;
// type in the box to highlight the frames whose name matches (the share of samples they hold is shown).
(function () {
  if (window.vbFlame) return;
  var NS = "http://www.w3.org/2000/svg", ROW = 17, WIDTH = 1200;
  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function depth(n) {
    var d = 0;
    for (var i = 0; i < n[3].length; i++) d = Math.max(d, depth(n[3][i]));
    return d + 1;
  }
  window.vbFlame = function (id) {
    var box = document.getElementById(id);
    var spec = JSON.parse(box.querySelector("script[type='application/json']").textContent);
    var svg = box.querySelector("svg"), info = box.querySelector(".fg-info");
    var search = box.querySelector("input"), reset = box.querySelector("button");
    var root = spec.tree, zoom = root, total = root[1], rx = null;
    function draw() {
      while (svg.firstChild) svg.removeChild(svg.firstChild);
      var rows = depth(zoom);
      svg.setAttribute("viewBox", "0 0 " + WIDTH + " " + rows * ROW);
      svg.setAttribute("height", rows * ROW);
      var matched = 0;
      (function frame(n, x, w, d) {
        if (w < 0.4) return;
        var hit = rx && rx.test(n[0]);
        if (hit) matched += n[1];
        var g = el("g", {"class": "fg-frame"}, svg);
        var mech = spec.mechanisms[n[2]] || "";
        el("title", {}, g).textContent = n[0] + " — " + n[1] + " samples, " + (100 * n[1] / total).toFixed(2) +
          " %" + (mech ? " — " + mech : "");
        el("rect", {x: x, y: d * ROW, width: Math.max(w - 0.5, 0.1), height: ROW - 1, rx: 2,
                    fill: hit ? "#e040fb" : spec.colors[n[2]] || "#ccc"}, g);
        if (w > 35) {
          var t = el("text", {x: x + 3, y: d * ROW + 12, "font-size": 11, "font-family": "monospace"}, g);
          var fit = Math.floor((w - 6) / 6.7);
          t.textContent = n[0].length > fit ? n[0].slice(0, Math.max(fit - 2, 0)) + ".." : n[0];
        }
        g.addEventListener("click", function (ev) { ev.stopPropagation(); zoom = n; draw(); });
        g.addEventListener("mouseover", function () {
          info.textContent = n[0] + ": " + (100 * n[1] / total).toFixed(2) + " % of all samples" +
            (mech ? " (" + mech + ")" : "");
        });
        var cx = x;
        for (var i = 0; i < n[3].length; i++) {
          var cw = w * n[3][i][1] / n[1];
          frame(n[3][i], cx, cw, d + 1);
          cx += cw;
        }
      })(zoom, 0, WIDTH, 0);
      if (rx) info.textContent = "matched: " + (100 * matched / total).toFixed(2) + " % of all samples";
    }
    search.addEventListener("input", function () {
      try { rx = search.value ? new RegExp(search.value) : null; } catch (e) { rx = null; }
      draw();
    });
    reset.addEventListener("click", function () { zoom = root; draw(); });
    var seen = {}, legend = box.querySelector(".fg-legend");
    (function walk(n) { seen[n[2]] = (seen[n[2]] || 0) + 1; n[3].forEach(walk); })(root);
    Object.keys(seen).forEach(function (i) {
      if (!spec.mechanisms[i]) return;
      var s = document.createElement("span");
      s.style.cssText = "display:inline-block;margin:2px 8px 2px 0;padding:0 4px;background:" + spec.colors[i];
      s.textContent = spec.mechanisms[i];
      legend.appendChild(s);
    });
    draw();
  };
})();
