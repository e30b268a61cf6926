/**
 * The console's terminal (workers/console/terminal.ts): xterm.js on the
 * session's terminal socket. Keys go as binary messages, a resize and the
 * detach as JSON text messages; the sandbox's output (already escape-filtered
 * by the server) is written to the screen; the server's controls say whether
 * the person is in, was refused, or detached.
 */
'use strict';
(function () {
  const box = document.getElementById('terminal');
  const state = document.getElementById('terminal-state');
  const detach = document.getElementById('detach');
  const presence = document.getElementById('presence');
  const watching = box.dataset.watch === 'yes';
  const say = (text) => (state.textContent = text);
  // Where each person in the session is (the same words on the editor's page).
  const where = (p) =>
    p.watching ? 'watching' : { terminal: 'typing', editor: 'in VS Code', desktop: 'on the desktop' }[p.way];
  const term = new window.Terminal({
    convertEol: false,
    cursorBlink: !watching,
    scrollback: 5000,
    disableStdin: watching,
  });
  term.open(box);
  // A size that fits the box: xterm's cell size is known once it has rendered.
  const cell = { width: 9, height: 17 };
  const fit = () => ({
    cols: Math.max(20, Math.min(1000, Math.floor(box.clientWidth / cell.width))),
    rows: Math.max(5, Math.min(1000, Math.floor(box.clientHeight / cell.height))),
  });
  const size = fit();
  term.resize(size.cols, size.rows);

  const url = new URL('/sessions/' + encodeURIComponent(box.dataset.session) + '/terminal/socket', location.href);
  url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  url.searchParams.set('ticket', box.dataset.ticket);
  url.searchParams.set('cols', String(size.cols));
  url.searchParams.set('rows', String(size.rows));
  if (watching) url.searchParams.set('watch', '1');
  const socket = new WebSocket(url);
  socket.binaryType = 'arraybuffer';
  const encoder = new TextEncoder();
  let ended = false;

  socket.addEventListener('message', (event) => {
    if (typeof event.data !== 'string') return term.write(new Uint8Array(event.data));
    const message = JSON.parse(event.data);
    if (message.type === 'waiting') say('attaching once the agent’s step under way has ended…');
    if (message.type === 'presence') {
      presence.textContent = message.people.map((p) => p.who + ' (' + where(p) + ')').join(', ');
    }
    if (message.type === 'watching') {
      say('watching; your keys are not sent');
      detach.disabled = false;
    }
    if (message.type === 'attached') {
      say('attached as ' + message.by + ' (' + message.sandbox + '); detach to hand the session back');
      detach.disabled = false;
      term.focus();
    }
    if (message.type === 'refused') {
      ended = true;
      say('refused: ' + message.reason);
    }
    if (message.type === 'detached') {
      ended = true;
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
    if (!ended) say('closed' + (event.reason ? ': ' + event.reason : ' (code ' + event.code + ')'));
  });
  term.onData((text) => {
    if (!watching && socket.readyState === WebSocket.OPEN) socket.send(encoder.encode(text));
  });
  // The window's size decides the terminal's; xterm then reports the new size below.
  addEventListener('resize', () => {
    const next = fit();
    if (next.cols !== term.cols || next.rows !== term.rows) term.resize(next.cols, next.rows);
  });
  term.onResize(({ cols, rows }) => {
    if (!watching && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: 'resize', cols, rows }));
  });
  detach.addEventListener('click', () => {
    detach.disabled = true;
    say(watching ? 'leaving…' : 'detaching…');
    socket.send(JSON.stringify({ type: 'detach' }));
  });
})();
