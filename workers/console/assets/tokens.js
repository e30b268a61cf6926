// The CLI token page: issues a personal token for the signed-in person and shows it once.
'use strict';
document.getElementById('issue').addEventListener('click', async () => {
  const out = document.getElementById('token');
  const res = await fetch('/api/tokens', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  const body = await res.json();
  out.textContent = res.ok ? body.token : body.error;
});
