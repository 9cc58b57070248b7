// The timeline chart of a job, drawn as inline SVG: tasks finished per
// bucket (completed and failed, stacked) and the share of the job finished.

import { h, localTime, num, s } from './dom.js';

const W = 760;
const H = 180;
const pad = { left: 44, right: 44, top: 12, bottom: 26 };

/** Returns an SVG chart of a GET /v1/jobs/{id}/timeline body. */
export function timelineChart(timeline, expected) {
  const buckets = timeline.buckets;
  if (!buckets.some((b) => b.completed + b.failed > 0)) return h('p', { class: 'muted', id: 'timeline-empty' }, 'No task has finished.');
  const innerW = W - pad.left - pad.right;
  const innerH = H - pad.top - pad.bottom;
  const peak = Math.max(1, ...buckets.map((b) => b.completed + b.failed));
  const slot = innerW / buckets.length;
  const barW = Math.min(48, Math.max(1, slot * 0.8));
  const y = (n) => pad.top + innerH - (innerH * n) / peak;
  const perSecond = (n) => n / timeline.bucket_seconds;

  const bars = [];
  const line = [];
  let cumulative = 0;
  buckets.forEach((b, i) => {
    const x = pad.left + i * slot + (slot - barW) / 2;
    const tip = `${localTime(b.start)}: ${num(b.completed)} completed, ${num(b.failed)} failed (${perSecond(b.completed + b.failed).toFixed(2)}/s)`;
    bars.push(s('g', { class: 'bucket' }, s('title', null, tip),
      s('rect', { class: 'ok', x, y: y(b.completed), width: barW, height: y(0) - y(b.completed) }),
      s('rect', { class: 'bad', x, y: y(b.completed + b.failed), width: barW, height: y(b.completed) - y(b.completed + b.failed) })));
    cumulative += b.completed + b.failed;
    const share = expected > 0 ? Math.min(1, cumulative / expected) : 0;
    line.push(`${(pad.left + (i + 1) * slot).toFixed(1)},${(pad.top + innerH - innerH * share).toFixed(1)}`);
  });
  line.unshift(`${pad.left},${pad.top + innerH}`);

  const label = (x, yy, text, anchor = 'start', cls = 'axis') => s('text', { x, y: yy, 'text-anchor': anchor, class: cls }, text);
  const last = buckets.at(-1);
  const end = new Date(Date.parse(last.start) + 1000 * timeline.bucket_seconds).toISOString();
  return s('svg', {
    viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', id: 'timeline-chart',
    'aria-label': `tasks finished per ${timeline.bucket_seconds} s`,
  },
  s('line', { class: 'grid', x1: pad.left, x2: W - pad.right, y1: y(0), y2: y(0) }),
  s('line', { class: 'grid dashed', x1: pad.left, x2: W - pad.right, y1: y(peak), y2: y(peak) }),
  bars,
  s('polyline', { class: 'cumulative', points: line.join(' ') }),
  label(pad.left - 6, y(peak) + 4, num(peak), 'end'),
  label(pad.left - 6, y(0) + 4, '0', 'end'),
  label(W - pad.right + 6, pad.top + 4, '100%', 'start'),
  label(W - pad.right + 6, pad.top + innerH + 4, '0%', 'start'),
  label(pad.left, H - 8, localTime(buckets[0].start)),
  label(W - pad.right, H - 8, localTime(end), 'end'),
  label(W / 2, H - 8, `tasks finished per ${timeline.bucket_seconds} s; line: share of the job finished`, 'middle', 'axis legend'));
}
