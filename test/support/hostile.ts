/**
 * What the hostile-agent suites share, whatever runs their sandboxes
 * (test/e2e/hardening.test.ts on Docker, test/e2e/k8s-sandbox.test.ts on
 * pods): the activities' dependencies for probing runStep directly, and the
 * egress probe that runs in the sandbox.
 */
import path from 'node:path';
import type { ActivityDeps } from '../../activities';
import { loadConfig, type Config } from '../../platform/config';
import type { Logger } from '../../platform/log';
import type { Redactor } from '../../platform/scrub';
import { createRepoLookup, RepoRegistry } from '../../repos/registry';
import { CheckpointStore } from '../../sandbox/checkpoints';
import type { SandboxProvider } from '../../sandbox/provider';
import { SnapshotRegistry } from '../../sandbox/snapshots';
import { ArtifactStore } from '../../store/artifacts';
import { AuditTrail } from '../../store/audit';
import type { Database } from '../../store/db';
import { modelSettings } from '../../workers/worker';
import { testAuditKey } from './helpers';

/** Activity dependencies of a host 'egress-test' whose data lives in `dataDir`, granting `secrets`. */
export function probeDeps(opts: {
  sandboxes: SandboxProvider;
  dataDir: string;
  config: Config;
  db: Database;
  redactor: Redactor;
  secrets: Record<string, string>;
  token: string;
  log: Logger;
}): ActivityDeps {
  const { sandboxes, dataDir, config, db, redactor, secrets, token, log } = opts;
  return {
    sandboxes,
    artifacts: new ArtifactStore(path.join(dataDir, 'artifacts')),
    mirrorsDir: path.join(dataDir, 'mirrors'),
    hostId: 'egress-test',
    hostQueue: 'unused',
    baseImage: config.DRYDOCK_BASE_IMAGE!,
    egressRoot: path.join(dataDir, 'egress'),
    secrets,
    policy: { required: [], approvers: [], forbidSelfApproval: false, separateGates: false },
    github: { apiUrl: 'http://127.0.0.1:1', token },
    sessionIsRunning: async () => true,
    sessionLink: () => '',
    models: modelSettings(loadConfig({})),
    db,
    // The worker's one redactor: its own token and every secret it may grant.
    redactor,
    audit: new AuditTrail(db.pool, 'egress-test', redactor, testAuditKey()),
    snapshots: new SnapshotRegistry(db.pool),
    repos: createRepoLookup(new RepoRegistry(db.pool)),
    devMode: true,
    checkpoints: new CheckpointStore(db.pool),
    hostTimeoutMs: 60_000,
    requestSnapshotBuild: async () => false,
    log,
  };
}

/**
 * Runs in the sandbox: plays a client of the HTTP proxy at 127.0.0.1:3128
 * (absolute-URI requests and CONNECT), printing one line per attempt.
 * Arguments: the GET-only stand-in's port, the open one's, a port no rule names.
 */
export const EGRESS_PROBE = `
const http = require('node:http');
const [allowed, tunnel, other, direct] = process.argv.slice(2);
const proxy = { host: '127.0.0.1', port: 3128 };
console.log('proxy env', process.env.HTTP_PROXY);
const ask = (label, opts, body) => new Promise((resolve) => {
  const req = http.request({ ...proxy, ...opts }, (res) => {
    let text = '';
    res.on('data', (c) => (text += c));
    res.on('end', () => { console.log(label, res.statusCode, text.trim()); resolve(); });
  });
  req.on('error', (e) => { console.log(label.split(' ')[0], 'failed', e.code); resolve(); });
  req.end(body);
});
const connect = (label, target, then) => new Promise((resolve) => {
  const req = http.request({ ...proxy, method: 'CONNECT', path: target });
  req.on('connect', (res, socket) => {
    if (res.statusCode !== 200 || !then) { console.log(label, res.statusCode); socket.destroy(); return resolve(); }
    socket.write('GET ' + then + ' HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n');
    let text = '';
    socket.on('data', (c) => (text += c));
    socket.on('end', () => { console.log(label, res.statusCode, text.split('\\r\\n\\r\\n')[1]); resolve(); });
  });
  req.on('error', (e) => { console.log(label, 'failed', e.code); resolve(); });
  req.end();
});
(async () => {
  if (direct) {
    await ask('GET', { path: 'http://127.0.0.1:' + allowed + '/hello' });
    return;
  }
  await ask('GET allowed', { path: 'http://127.0.0.1:' + allowed + '/hello' });
  await ask('POST on a GET-only rule', { method: 'POST', path: 'http://127.0.0.1:' + allowed + '/upload' }, 'data');
  await ask('other host port', { path: 'http://127.0.0.1:' + other + '/' });
  await ask('unlisted name', { path: 'http://example.com/' });
  await connect('private range', '10.0.0.1:443');
  await connect('CONNECT on a GET-only rule', '127.0.0.1:' + allowed);
  await connect('CONNECT allowed', '127.0.0.1:' + tunnel, '/through-tunnel');
})();
`;
