// Charts drawn as SVG from numbers, each with the same numbers as a table for screen
// readers and copying: bars (series side by side per label) and dots (one per point in
// time). `limit`: a line the values may never cross, drawn dashed.
import { h, when } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const COLOURS = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626"];
const WIDTH = 640, HEIGHT = 200, LEFT = 48, BOTTOM = 24;

function svg(tag, attrs, text) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  if (text !== undefined) el.textContent = text;
  return el;
}

// The axes, the scale's top, the limit line, and what to draw in between.
function frame(title, top, limit, marks, ends) {
  const y = (v) => (HEIGHT - BOTTOM) * (1 - v / top);
  const root = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": title, class: "chart" });
  root.append(svg("line", { x1: LEFT, x2: WIDTH, y1: HEIGHT - BOTTOM, y2: HEIGHT - BOTTOM, stroke: "currentColor", "stroke-opacity": 0.4 }),
    svg("text", { x: 0, y: 12, "font-size": 11, fill: "currentColor" }, top.toLocaleString()));
  root.append(...marks(y));
  if (limit) root.append(svg("line", { x1: LEFT, x2: WIDTH, y1: y(limit), y2: y(limit), stroke: "#dc2626", "stroke-dasharray": "4 3" }));
  ends.forEach(([x, label], i) => root.append(svg("text", { x, y: HEIGHT - 6, "font-size": 11, fill: "currentColor", "text-anchor": i ? "end" : "start" }, label)));
  return root;
}

function figure(title, root, legend, head, rows) {
  const table = h("details", {}, h("summary", {}, "As a table"), h("table", {},
    h("thead", {}, h("tr", {}, head.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, rows.map(([label, ...cells]) => h("tr", {}, h("th", { scope: "row" }, label), cells.map((c) => h("td", {}, String(c))))))));
  return h("figure", {}, root, h("figcaption", {}, title), legend, table);
}

export function bars(title, labels, series, limit) {
  if (!series.some((s) => s.values.some((v) => v))) return h("p", {}, `${title}: no data yet.`);
  const top = Math.max(1, limit || 0, ...series.flatMap((s) => s.values));
  const slot = (WIDTH - LEFT) / labels.length;
  const bar = Math.min(28, Math.max(1, slot / (series.length + 1)));
  const root = frame(title, top, limit, (y) => series.flatMap((s, i) => s.values.flatMap((v, j) => {
    if (v === null) return [];  // nothing to show that day (a zero is shown, flat)
    const rect = svg("rect", { x: LEFT + j * slot + i * bar, y: y(v), width: bar * 0.9, height: Math.max(0, HEIGHT - BOTTOM - y(v)), fill: COLOURS[i % COLOURS.length] });
    rect.append(svg("title", {}, `${labels[j]} · ${s.name}: ${v}`));
    return rect;
  })), [[LEFT, labels[0]], [WIDTH, labels[labels.length - 1]]]);
  const legend = h("p", { class: "legend" }, series.map((s, i) => h("span", { class: "badge", "data-colour": i }, s.name)));
  return figure(title, root, legend, ["Day", ...series.map((s) => s.name)],
    labels.map((label, j) => [label, ...series.map((s) => s.values[j] ?? "—")]));
}

// `points`: [{ at: ISO time, value }], oldest first.
export function dots(title, name, points, limit) {
  if (!points.length) return h("p", {}, "No data yet.");
  const times = points.map((p) => Date.parse(p.at));
  const first = times[0], span = Math.max(1, times[times.length - 1] - first);
  const top = Math.max(1, limit || 0, ...points.map((p) => p.value));
  const x = (t) => LEFT + 4 + (WIDTH - LEFT - 8) * ((t - first) / span);
  const root = frame(title, top, limit, (y) => points.map((p, i) => {
    const dot = svg("circle", { cx: x(times[i]), cy: y(p.value), r: 2.5, fill: COLOURS[0] });
    dot.append(svg("title", {}, `${when(p.at)} · ${name}: ${p.value}`));
    return dot;
  }), [[LEFT, when(points[0].at)], [WIDTH, when(points[points.length - 1].at)]]);
  return figure(title, root, null, ["Turn", name], points.map((p) => [when(p.at), p.value]));
}
