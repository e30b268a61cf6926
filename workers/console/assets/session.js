/**
 * The session page's script (served from the project, allowed by the page's
 * nonce): the review clock's reports, Approve / Reject bound to the change on
 * display, line comments sent together as one review, files marked viewed,
 * the keys, and the live redraw from the events stream. Every handler is
 * delegated from the document: the live part is redrawn whole.
 */
'use strict';
(function () {
  const api = location.pathname.replace(/^\/sessions\//, '/api/sessions/');
  const sessionKey = location.pathname;
  const $ = (id) => document.getElementById(id);

  /** Writes an answer into the element that has the id now (a redraw may have replaced the one clicked). */
  function say(id, text, className) {
    const answer = $(id);
    if (!answer) return;
    answer.textContent = text;
    answer.className = className;
  }

  async function post(path, body, opts = {}) {
    const res = await fetch(api + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      keepalive: opts.keepalive === true,
    });
    return { ok: res.ok, data: await res.json().catch(() => ({})) };
  }

  // ---- the review clock: visible and in use, reported for the change on display ----
  const marker = () => $('review-change');
  const idleMs = Number(marker()?.dataset.idle) || 120000;
  const clock = window.drydockReviewClock.createReviewClock(idleMs, performance.now(), !document.hidden);
  let counting = marker()?.dataset.change || '';
  const decided = new Set();
  for (const type of ['keydown', 'pointerdown', 'pointermove', 'wheel', 'scroll', 'focusin', 'input']) {
    addEventListener(type, () => clock.use(performance.now()), { passive: true, capture: true });
  }
  document.addEventListener('visibilitychange', () => {
    clock.visibility(!document.hidden, performance.now());
    if (document.hidden) report(true);
  });
  addEventListener('pagehide', () => report(true));
  setInterval(() => report(false), 10000);

  /** The time counted on the change so far, taken for a report or a decision. */
  function takeFor(change) {
    const ms = clock.take(performance.now());
    return change && change === counting && !decided.has(change) ? ms : 0;
  }
  function report(leaving) {
    const ms = takeFor(counting);
    if (ms > 0) void post('/review-time', { change: counting, reviewMs: ms }, { keepalive: leaving }).catch(() => {});
  }
  /** After a redraw: another change on display closes the count of the one before. */
  function followChange() {
    const now = marker()?.dataset.change || '';
    if (now === counting) return;
    report(false);
    counting = now;
  }

  // ---- Approve / Reject, bound to the change on display ----
  async function decide(button) {
    say('answer', 'sending…', '');
    const comment = $('comment')?.value.trim();
    const change = button.dataset.change;
    const body = {
      decision: button.dataset.decision,
      action: button.dataset.action,
      change,
      reviewMs: takeFor(change),
    };
    if (comment) body.comment = comment;
    try {
      const { ok, data } = await post('/decide', body);
      const text = ok
        ? (data.decision === 'approve' ? 'approved ' : 'rejected ') + data.action + ' as ' + data.by
        : 'refused: ' + data.error;
      say('answer', text, ok ? 'ok' : 'bad');
      if (ok) {
        decided.add(change);
        for (const b of document.querySelectorAll('button[data-decision]')) b.disabled = true;
      }
    } catch (err) {
      say('answer', 'failed: ' + err, 'bad');
    }
  }

  // ---- comments on lines, sent with a note as one review ----
  const pendingKey = 'drydock-comments:' + sessionKey;
  const pending = () => JSON.parse(sessionStorage.getItem(pendingKey) || '[]');
  const keep = (list) => sessionStorage.setItem(pendingKey, JSON.stringify(list));

  function renderPending() {
    const list = $('pending-comments');
    if (!list) return;
    list.textContent = '';
    pending().forEach((c, i) => {
      const item = document.createElement('li');
      item.textContent = c.path + ', line ' + c.line + ': ' + c.body + ' ';
      const remove = document.createElement('button');
      remove.type = 'button';
      remove.className = 'comment-remove';
      remove.dataset.index = String(i);
      remove.textContent = 'remove';
      remove.setAttribute('aria-label', 'remove the comment on ' + c.path + ' line ' + c.line);
      item.append(remove);
      list.append(item);
    });
    say('pending-count', String(pending().length), '');
  }

  /** Opens a file's comment form at `line` (a click on a line number) or empty (the c key). */
  function openComment(file, line) {
    const form = file.querySelector('form.line-comment');
    if (!form) return;
    file.open = true;
    form.hidden = false;
    form.querySelector('.comment-line').value = line || '';
    (line ? form.querySelector('.comment-body') : form.querySelector('.comment-line')).focus();
  }

  function lineOf(cell) {
    const text = (sel) => cell.querySelector(sel)?.textContent.trim();
    return Number(text('.line-num2') || text('.line-num1') || cell.textContent.trim()) || 0;
  }

  function addComment(form) {
    const line = Number(form.querySelector('.comment-line').value);
    const body = form.querySelector('.comment-body').value.trim();
    if (!line || !body) return;
    keep([...pending(), { path: form.dataset.path, line, body }]);
    form.querySelector('.comment-body').value = '';
    form.hidden = true;
    renderPending();
    say('followup-answer', 'comment added: send the review when you are done', '');
  }

  async function sendReview() {
    const note = $('followup-text')?.value.trim() || '';
    const comments = pending();
    const body = { comments, change: counting, reviewMs: takeFor(counting) };
    if (note) body.text = note;
    say('followup-answer', 'sending…', '');
    try {
      const { ok, data } = await post('/followups', body);
      say('followup-answer', ok ? 'accepted for round ' + data.round : 'refused: ' + data.error, ok ? 'ok' : 'bad');
      if (ok) {
        keep([]);
        renderPending();
        if ($('followup-text')) $('followup-text').value = '';
      }
    } catch (err) {
      say('followup-answer', 'failed: ' + err, 'bad');
    }
  }

  // ---- files marked viewed, per change ----
  const fileOf = (box) => box.closest('.file-block').querySelector('details.file');
  const viewedKey = () => 'drydock-viewed:' + sessionKey + ':' + counting;
  const viewed = () => new Set(JSON.parse(localStorage.getItem(viewedKey()) || '[]'));
  function applyViewed() {
    const seen = viewed();
    for (const box of document.querySelectorAll('#diff input.viewed')) {
      box.checked = seen.has(box.dataset.path);
      fileOf(box).classList.toggle('viewed', box.checked);
    }
  }
  function markViewed(box) {
    const seen = viewed();
    if (box.checked) seen.add(box.dataset.path);
    else seen.delete(box.dataset.path);
    localStorage.setItem(viewedKey(), JSON.stringify([...seen]));
    const file = fileOf(box);
    file.classList.toggle('viewed', box.checked);
    if (box.checked) file.open = false;
  }

  // ---- keys ----
  let current = -1;
  const files = () => [...document.querySelectorAll('#diff details.file')];
  function goTo(step) {
    const all = files();
    if (!all.length) return;
    current = Math.max(0, Math.min(all.length - 1, current + step));
    const summary = all[current].querySelector('summary');
    summary.focus();
    summary.scrollIntoView({ block: 'start' });
  }
  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest('input, textarea, select, [contenteditable]')) return;
    const file = files()[current];
    const actions = {
      j: () => goTo(1),
      k: () => goTo(-1),
      v: () => file && file.closest('.file-block')?.querySelector('input.viewed')?.click(),
      c: () => file && openComment(file),
      A: () => document.querySelector('button[data-decision=approve]:not(:disabled)')?.click(),
      R: () => document.querySelector('button[data-decision=reject]:not(:disabled)')?.click(),
    };
    const act = actions[event.key];
    if (!act) return;
    event.preventDefault();
    act();
  }

  // ---- one delegated handler per kind of event ----
  document.addEventListener('keydown', onKey);
  document.addEventListener('click', (event) => {
    const target = event.target;
    const button = target.closest && target.closest('button[data-decision]');
    if (button) return void decide(button);
    if (target.closest && target.closest('#followup-send')) return void sendReview();
    const cell = target.closest && target.closest('#diff .d2h-code-linenumber');
    if (cell) return openComment(cell.closest('details.file'), lineOf(cell));
    const remove = target.closest && target.closest('button.comment-remove');
    if (remove) {
      keep(pending().filter((_, i) => i !== Number(remove.dataset.index)));
      return renderPending();
    }
    const cancel = target.closest && target.closest('button.comment-cancel');
    if (cancel) cancel.closest('form').hidden = true;
  });
  document.addEventListener('submit', (event) => {
    const form = event.target.closest('form.line-comment');
    if (!form) return;
    event.preventDefault();
    addComment(form);
  });
  document.addEventListener('change', (event) => {
    if (event.target.matches && event.target.matches('input.viewed')) markViewed(event.target);
  });
  document.addEventListener('focusin', (event) => {
    const file = event.target.closest && event.target.closest('#diff details.file');
    if (file) current = files().indexOf(file);
  });

  // ---- live: the events stream redraws the live part; what is typed and the follow-up's answer survive ----
  // (A decision's answer, #answer, is outside it: the redraw after a decision drops the approval section.)
  // So do the focus and the caret: a redraw may come while a person types, whose next keys would otherwise
  // go nowhere. The stream is told the version the page shows, so it sends only a part that changed.
  // Only a text field has a caret: a focused button (the review's "Send review" once clicked) has no
  // selectionStart at all, and a caret for it made the redraw throw before it put the answer back.
  const caretOf = (el) => {
    try {
      return typeof el.selectionStart === 'number'
        ? [el.selectionStart, el.selectionEnd, el.selectionDirection]
        : undefined;
    } catch {
      return undefined; // a field without a caret
    }
  };
  const events = new EventSource(
    location.pathname + '/events?seen=' + encodeURIComponent($('live').dataset.seen || ''),
  );
  events.addEventListener('update', (event) => {
    const update = JSON.parse(event.data);
    const kept = ['comment', 'followup-text'].map((id) => [id, $(id)?.value ?? '']);
    const said = ['followup-answer'].map((id) => [id, $(id)]);
    const focused = document.activeElement;
    const focusId = focused && focused.id && $('live').contains(focused) ? focused.id : '';
    const caret = focusId ? caretOf(focused) : undefined;
    $('phase').textContent = update.phase;
    $('live').innerHTML = update.html;
    for (const [id, typed] of kept) if ($(id)) $(id).value = typed;
    const refocus = focusId && $(focusId);
    if (refocus) {
      refocus.focus();
      if (caret) refocus.setSelectionRange(...caret);
    }
    for (const [id, before] of said) {
      const again = $(id);
      if (again && before && before.textContent) {
        again.textContent = before.textContent;
        again.className = before.className;
      }
    }
    followChange();
    applyViewed();
    renderPending();
  });
  events.addEventListener('end', () => {
    events.close();
    $('live-state').textContent = 'ended';
  });
  applyViewed();
  renderPending();
})();
