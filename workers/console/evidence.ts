/**
 * The evidence beside a change: the tests' output, the browser check's pages
 * before and after the change with its video, and the session's rounds with
 * the decisions and comments made on each.
 */
import type { BrowserResult, SessionStatus } from '../../workflows/api';
import { describeVerification } from '../../workflows/rules/verification';
import { esc } from './page';

export function testsSection(s: SessionStatus): string {
  const v = s.verification;
  if (!v) return '<p>No verification configured.</p>';
  const report = v.report
    ? `<p>${v.report.total} tests: ${v.report.passed} passed, ${v.report.failed} failed, ${v.report.skipped} skipped</p>`
    : '';
  return `<p class="${v.passed ? 'ok' : 'bad'}" id="verdict">${esc(describeVerification(v))}</p>
${v.summary ? `<pre>${esc(v.summary)}</pre>` : ''}${report}
${v.outputTail ? `<details><summary>test output (tail)</summary><pre>${esc(v.outputTail)}</pre></details>` : ''}`;
}

/** The pages a browser run saw, by path: the checks' and the extra screenshots. */
function pagesOf(b: BrowserResult | undefined): Map<string, string> {
  const pages = new Map<string, string>();
  for (const c of b?.checks ?? []) if (c.screenshot) pages.set(c.path, c.screenshot);
  for (const p of b?.screenshots ?? []) if (p.screenshot && !pages.has(p.path)) pages.set(p.path, p.screenshot);
  return pages;
}

const figure = (ref: string | undefined, caption: string) =>
  ref
    ? `<figure><img class="shot" alt="${esc(caption)}" src="/artifacts/${esc(ref)}"><figcaption>${esc(caption)}</figcaption></figure>`
    : `<p>${esc(caption)}: no screenshot</p>`;

/** Before and after the change, page by page, and the video of the check. */
export function screenshotsSection(s: SessionStatus): string {
  const after = pagesOf(s.verification?.browser);
  const before = pagesOf(s.before);
  const paths = [...new Set([...after.keys(), ...before.keys()])];
  const pairs = paths
    .map(
      (p) =>
        `<div class="pair" data-page="${esc(p)}">${s.before ? figure(before.get(p), `${p} before`) : ''}${figure(after.get(p), `${p} after`)}</div>`,
    )
    .join('\n');
  const video = s.verification?.browser?.video;
  const clip = video
    ? `<h3>Video of the browser check</h3><video class="shot" id="check-video" controls preload="metadata" src="/artifacts/${esc(video)}" aria-label="video of the browser check"></video>
<p><a href="/artifacts/${esc(video)}">download the video</a></p>`
    : s.verification?.browser?.videoMessage
      ? `<p>${esc(s.verification.browser.videoMessage)}</p>`
      : '';
  return pairs || clip ? `${pairs}${clip}` : '<p>None.</p>';
}

/** The rounds, each with its request, its change, and the decisions and comments made on it. */
export function roundsSection(s: SessionStatus): string {
  if (!s.rounds?.length) return '';
  const items = s.rounds.map((r, i) => {
    const decided = s.decisions
      .filter((d) => r.change && d.change === r.change)
      .map(
        (d) =>
          `${d.decision === 'approve' ? 'approved' : 'rejected'} ${esc(d.action)} by ${esc(d.by)}${d.comment ? `: “${esc(d.comment)}”` : ''}`,
      );
    const next = s.rounds![i + 1];
    const comments = next
      ? `<details><summary>comments that started round ${next.round} (by ${esc(next.by ?? 'unknown')})</summary><pre>${esc(next.request)}</pre></details>`
      : '';
    return `<li data-round="${r.round}"><strong>round ${r.round}</strong> by ${esc(r.by ?? 'unknown')}: ${esc(r.request.split('\n')[0].slice(0, 200))}${r.commit ? ` → <code>${esc(r.commit.slice(0, 12))}</code>` : ''}${r.pushed ? ' (pushed)' : ''}${decided.length ? `<br>${decided.join('; ')}` : ''}${comments}</li>`;
  });
  return `<h2>Rounds</h2><ol id="rounds">${items.join('')}</ol>`;
}
