// The attempts page: Pick sends the attempt and its whole change hash as JSON to the API
// (POST /api/sessions/:id/pick); a form would be a cookie-authenticated POST that any site
// could send. The page shows the answer, then the attempts as they are.
'use strict';
document.addEventListener('click', async (event) => {
  const button = event.target.closest('button[data-pick]');
  if (!button) return;
  const answer = document.getElementById('answer');
  answer.textContent = 'sending…';
  answer.className = '';
  for (const b of document.querySelectorAll('button[data-pick]')) b.disabled = true;
  const api = location.pathname.replace(/^\/attempts\//, '/api/sessions/') + '/pick';
  try {
    const res = await fetch(api, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ attempt: Number(button.dataset.pick), change: button.dataset.change }),
    });
    const body = await res.json().catch(() => ({}));
    answer.textContent = res.ok ? 'attempt ' + body.attempt + ' picked by ' + body.by : 'refused: ' + body.error;
    answer.className = res.ok ? 'ok' : 'bad';
    if (res.ok) setTimeout(() => location.reload(), 1000);
    else for (const b of document.querySelectorAll('button[data-pick]')) b.disabled = false;
  } catch (err) {
    answer.textContent = 'failed: ' + err;
    answer.className = 'bad';
  }
});
