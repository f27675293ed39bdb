// A bar chart drawn as SVG from numbers (series side by side per label), with the same
// numbers as a table for screen readers and copying. `limit`: a line not to cross.
import { h } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const COLOURS = ["#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626"];

function svg(tag, attrs) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

export function chart(title, labels, series, limit) {
  if (!labels.length) return h("p", {}, "No data yet.");
  const width = 640, height = 200, left = 48, bottom = 24;
  const top = Math.max(1, limit || 0, ...series.flatMap((s) => s.values));
  const slot = (width - left) / labels.length;
  const bar = Math.min(28, Math.max(1, slot / (series.length + 1)));
  const y = (v) => (height - bottom) * (1 - v / top);
  const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title, class: "chart" });
  root.append(svg("line", { x1: left, x2: width, y1: height - bottom, y2: height - bottom, stroke: "currentColor", "stroke-opacity": 0.4 }));
  const scale = svg("text", { x: 0, y: 12, "font-size": 11, fill: "currentColor" });
  scale.textContent = top.toLocaleString();
  root.append(scale);
  series.forEach((s, i) => s.values.forEach((v, j) => {
    const rect = svg("rect", { x: left + j * slot + i * bar, y: y(v), width: bar * 0.9, height: Math.max(0, height - bottom - y(v)), fill: COLOURS[i % COLOURS.length] });
    const tip = svg("title", {});
    tip.textContent = `${labels[j]} · ${s.name}: ${v}`;
    rect.append(tip);
    root.append(rect);
  }));
  if (limit) {
    root.append(svg("line", { x1: left, x2: width, y1: y(limit), y2: y(limit), stroke: "#dc2626", "stroke-dasharray": "4 3" }));
  }
  [0, labels.length - 1].forEach((j) => {
    const t = svg("text", { x: left + j * slot, y: height - 6, "font-size": 11, fill: "currentColor" });
    t.textContent = labels[j];
    root.append(t);
  });
  const legend = h("p", { class: "legend" }, series.map((s, i) =>
    h("span", { class: "badge", "data-colour": i }, s.name)));
  const table = h("details", {}, h("summary", {}, "As a table"), h("table", {},
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Day"), series.map((s) => h("th", { scope: "col" }, s.name)))),
    h("tbody", {}, labels.map((label, j) => h("tr", {}, h("th", { scope: "row" }, label), series.map((s) => h("td", {}, String(s.values[j]))))))));
  return h("figure", {}, root, h("figcaption", {}, title), legend, table);
}
