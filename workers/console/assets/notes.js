// The repo notes page: Approve, Save edit and Drop send the note's text as JSON to the API
// (POST /api/notes/:id); a form would be a cookie-authenticated POST that any site could send.
'use strict';
document.addEventListener('click', async (event) => {
  const button = event.target.closest('button[data-note]');
  if (!button) return;
  const answer = document.getElementById('answer');
  const id = button.dataset.note;
  const action = button.dataset.action;
  const body = action === 'drop' ? { action } : { action, text: document.getElementById('text-' + id).value };
  answer.textContent = 'sending…';
  answer.className = '';
  button.disabled = true;
  try {
    const res = await fetch('/api/notes/' + encodeURIComponent(id), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    const note = await res.json().catch(() => ({}));
    answer.textContent = res.ok
      ? 'note #' + note.id + ' ' + note.status + ' (v' + note.version + ')'
      : 'refused: ' + note.error;
    answer.className = res.ok ? 'ok' : 'bad';
    if (res.ok) setTimeout(() => location.reload(), 800);
    else button.disabled = false;
  } catch (err) {
    answer.textContent = 'failed: ' + err;
    answer.className = 'bad';
    button.disabled = false;
  }
});
