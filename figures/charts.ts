/**
 * Charts as server-rendered SVG: no script, no CDN, readable without
 * JavaScript and printable. A line chart for figures over time, a bar chart
 * for comparing a pilot's configurations. Each has a title and a text
 * description for screen readers; colours are Okabe and Ito's, which stay
 * apart for colour-blind readers.
 */

const COLOURS = ['#0072B2', '#E69F00', '#009E73', '#CC79A7', '#56B4E9', '#D55E00', '#F0E442', '#000000'];

export interface Series {
  name: string;
  /** One value per x label (null: nothing that period). */
  values: (number | null)[];
}

export interface LineChart {
  title: string;
  /** The x axis' labels, e.g. days. */
  labels: string[];
  series: Series[];
  /** The unit of the values, shown on the y axis ("%", "min", "USD"). */
  unit?: string;
}

export interface BarChart {
  title: string;
  bars: { label: string; value: number | null }[];
  unit?: string;
}

const W = 640;
const H = 260;
const PAD = { left: 56, right: 16, top: 28, bottom: 44 };

function esc(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}

/** A round upper bound of the y axis and its ticks (1, 2 or 5 times a power of ten). */
export function yTicks(max: number): number[] {
  if (!(max > 0)) return [0, 1];
  const raw = max / 4;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw)!;
  const ticks: number[] = [];
  for (let t = 0; t < max + step - 1e-9; t += step) ticks.push(Number(t.toPrecision(12)));
  return ticks;
}

const show = (n: number) => (Math.abs(n) >= 100 || Number.isInteger(n) ? String(Math.round(n)) : n.toPrecision(2));

function frame(title: string, body: string, description: string, id: string): string {
  return `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-labelledby="${id}-t ${id}-d" font-family="system-ui,sans-serif" font-size="11">
<title id="${id}-t">${esc(title)}</title><desc id="${id}-d">${esc(description)}</desc>
<rect width="${W}" height="${H}" fill="#fff"/><text x="${PAD.left}" y="16" font-size="13" font-weight="600">${esc(title)}</text>
${body}</svg>`;
}

/** The y axis: grid lines and labels; returns where a value lands. */
function yAxis(max: number, unit: string | undefined): { svg: string; y: (v: number) => number } {
  const ticks = yTicks(max);
  const top = ticks[ticks.length - 1];
  const y = (v: number) => H - PAD.bottom - (v / top) * (H - PAD.top - PAD.bottom);
  const svg = ticks
    .map(
      (t) =>
        `<line x1="${PAD.left}" x2="${W - PAD.right}" y1="${y(t).toFixed(1)}" y2="${y(t).toFixed(1)}" stroke="#e5e5e5"/>` +
        `<text x="${PAD.left - 6}" y="${(y(t) + 4).toFixed(1)}" text-anchor="end" fill="#555">${esc(show(t))}${unit ? esc(unit) : ''}</text>`,
    )
    .join('\n');
  return { svg, y };
}

/** x labels, thinned so they do not overlap. */
function xLabels(labels: string[], x: (i: number) => number): string {
  const every = Math.max(1, Math.ceil(labels.length / 8));
  return labels
    .map((l, i) =>
      i % every === 0
        ? `<text x="${x(i).toFixed(1)}" y="${H - PAD.bottom + 16}" text-anchor="middle" fill="#555">${esc(l)}</text>`
        : '',
    )
    .join('');
}

let charts = 0;
const nextId = () => `chart${++charts}`;

export function lineChart(chart: LineChart): string {
  const id = nextId();
  const values = chart.series.flatMap((s) => s.values.filter((v): v is number => v !== null));
  const { svg: grid, y } = yAxis(Math.max(0, ...values), chart.unit);
  const n = chart.labels.length;
  const x = (i: number) => PAD.left + (n <= 1 ? 0.5 : i / (n - 1)) * (W - PAD.left - PAD.right);
  const lines = chart.series.slice(0, COLOURS.length).map((s, k) => {
    const colour = COLOURS[k];
    const points = s.values.map((v, i) => (v === null ? null : `${x(i).toFixed(1)},${y(v).toFixed(1)}`));
    // A gap where a period has no value: the line is broken there.
    const runs = points
      .join(' ')
      .split(/\s*null\s*/)
      .filter(Boolean);
    const paths = runs.map((r) => `<polyline fill="none" stroke="${colour}" stroke-width="2" points="${r.trim()}"/>`);
    const dots = points
      .filter((p): p is string => p !== null)
      .map((p) => `<circle cx="${p.split(',')[0]}" cy="${p.split(',')[1]}" r="2.5" fill="${colour}"/>`);
    const legend = `<rect x="${PAD.left + k * 110}" y="${H - 14}" width="10" height="10" fill="${colour}"/><text x="${PAD.left + 14 + k * 110}" y="${H - 5}">${esc(s.name.slice(0, 16))}</text>`;
    return paths.join('') + dots.join('') + legend;
  });
  const described = chart.series
    .map(
      (s) => `${s.name}: ${s.values.map((v, i) => `${chart.labels[i]} ${v === null ? 'none' : show(v)}`).join(', ')}`,
    )
    .join('; ');
  const empty =
    values.length === 0 ? `<text x="${W / 2}" y="${H / 2}" text-anchor="middle" fill="#777">no data</text>` : '';
  return frame(chart.title, grid + xLabels(chart.labels, x) + lines.join('\n') + empty, described || 'no data', id);
}

export function barChart(chart: BarChart): string {
  const id = nextId();
  const values = chart.bars.map((b) => b.value).filter((v): v is number => v !== null);
  const { svg: grid, y } = yAxis(Math.max(0, ...values), chart.unit);
  const slot = (W - PAD.left - PAD.right) / Math.max(1, chart.bars.length);
  const x = (i: number) => PAD.left + slot * (i + 0.5);
  const bars = chart.bars.map((b, i) => {
    if (b.value === null)
      return `<text x="${x(i).toFixed(1)}" y="${y(0) - 4}" text-anchor="middle" fill="#777">–</text>`;
    const top = y(b.value);
    const width = Math.min(60, slot * 0.6);
    return (
      `<rect x="${(x(i) - width / 2).toFixed(1)}" y="${top.toFixed(1)}" width="${width.toFixed(1)}" height="${(y(0) - top).toFixed(1)}" fill="${COLOURS[i % COLOURS.length]}"/>` +
      `<text x="${x(i).toFixed(1)}" y="${(top - 4).toFixed(1)}" text-anchor="middle">${esc(show(b.value))}</text>`
    );
  });
  const described = chart.bars.map((b) => `${b.label} ${b.value === null ? 'none' : show(b.value)}`).join(', ');
  return frame(
    chart.title,
    grid +
      xLabels(
        chart.bars.map((b) => b.label),
        x,
      ) +
      bars.join('\n'),
    described,
    id,
  );
}
