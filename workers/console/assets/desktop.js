/**
 * The console's desktop (workers/console/desktop.ts): noVNC's RFB client on
 * the session's desktop socket, which carries VNC both ways. The server
 * sends nothing else on it: why it closed is the close frame's reason.
 */
import RFB from '/assets/novnc/core/rfb.js';

const box = document.getElementById('desktop');
const state = document.getElementById('desktop-state');
const say = (text) => (state.textContent = text);

const url = new URL('/sessions/' + encodeURIComponent(box.dataset.session) + '/desktop/socket', location.href);
url.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
url.searchParams.set('ticket', box.dataset.ticket);
const socket = new WebSocket(url);
socket.binaryType = 'arraybuffer';
let reason = '';
socket.addEventListener('close', (event) => {
  reason = event.reason || 'code ' + event.code;
  say('closed: ' + reason);
});

const rfb = new RFB(box, socket);
rfb.scaleViewport = true;
rfb.background = '#222';
rfb.addEventListener('connect', () => say('connected: the desktop of ' + box.dataset.session));
rfb.addEventListener('disconnect', () => say('closed' + (reason ? ': ' + reason : '')));
// The server's clipboard is off (Xvnc's SendCutText=0); nothing from it would reach yours either way.
window.drydockDesktop = rfb;
