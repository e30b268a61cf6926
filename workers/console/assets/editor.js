/**
 * The console's editor (workers/console/editor.ts): opens the session's
 * editor socket, which attaches and starts VS Code in the sandbox; shows the
 * link to it once it answers; Detach sends {"type":"detach"}. It lists who
 * is in the session; watching (a reader), it lists them and nothing more.
 */
'use strict';
(function () {
  const box = document.getElementById('editor');
  const state = document.getElementById('editor-state');
  const detach = document.getElementById('detach');
  const open = document.getElementById('open-editor-window');
  const presence = document.getElementById('presence');
  const watching = box.dataset.watch === 'yes';
  const say = (text) => (state.textContent = text);
  // Where each person in the session is (the same words on the terminal's page).
  const where = (p) =>
    p.watching ? 'watching' : { terminal: 'typing', editor: 'in VS Code', desktop: 'on the desktop' }[p.way];
  const url = new URL('/sessions/' + encodeURIComponent(box.dataset.session) + '/editor/socket', location.href);
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  url.searchParams.set('ticket', box.dataset.ticket);
  if (watching) url.searchParams.set('watch', '1');
  const socket = new WebSocket(url);
  let ended = false;
  socket.addEventListener('message', (event) => {
    const message = JSON.parse(event.data);
    if (message.type === 'waiting') say('attaching once the agent’s step under way has ended…');
    if (message.type === 'starting') say('starting VS Code in the sandbox…');
    if (message.type === 'presence') {
      presence.textContent = message.people.map((p) => p.who + ' (' + where(p) + ')').join(', ');
    }
    if (message.type === 'watching') {
      say('watching; you get no editor');
      detach.disabled = false;
    }
    if (message.type === 'ready') {
      say('ready: attached as ' + message.by + ' (' + message.sandbox + '); detach to hand the session back');
      open.href = message.href;
      open.hidden = false;
      detach.disabled = false;
    }
    if (message.type === 'idle') {
      ended = true;
      say('closed: nothing reached the editor for ' + message.seconds + ' s; the session goes on');
    }
    if (message.type === 'refused') {
      ended = true;
      say('refused: ' + message.reason);
    }
    if (message.type === 'detached') {
      ended = true;
      open.hidden = true;
      detach.disabled = true;
      say(
        message.reason
          ? 'detached (' + message.reason + ')'
          : 'detached after ' + Math.round(message.durationMs / 1000) + ' s; the session goes on to verify your edits',
      );
    }
  });
  socket.addEventListener('close', (event) => {
    detach.disabled = true;
    open.hidden = true;
    if (!ended) say('closed' + (event.reason ? ': ' + event.reason : ' (code ' + event.code + ')'));
  });
  detach.addEventListener('click', () => {
    detach.disabled = true;
    say(watching ? 'leaving…' : 'detaching…');
    socket.send(JSON.stringify({ type: 'detach' }));
  });
})();
