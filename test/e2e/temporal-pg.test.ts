/**
 * Temporal on PostgreSQL with mTLS: the server infra/temporal-pg.sh builds
 * from Go modules, on a throwaway PostgreSQL cluster, with certificates made
 * here by openssl. A drydock session runs through it with a client
 * certificate; the CLI and a worker without one, or with one from a CA the
 * server does not trust, stop with one line that says so.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadTemporalSettings } from '../../platform/temporal-connection';
import type { SessionStatus } from '../../workflows/api';
import {
  git,
  makeFixtureRepo,
  newSessionId,
  pollUntil,
  runCli,
  scriptedSession,
  startSession,
  startStack,
  type TestStack,
} from '../support/helpers';
import { own } from '../support/leftovers';
import { startTemporalPg, type TemporalPg } from '../support/temporal-pg';

let dir: string;
let address: string;
let server: TemporalPg | undefined;
let stack: TestStack | undefined;

/** A CA, a server and a client certificate it signed, and a stranger's self-signed one. */
function makeCertificates(tls: string): void {
  mkdirSync(tls);
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: tls, stdio: 'pipe' });
  const key = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  openssl(
    'req',
    '-x509',
    ...key,
    '-keyout',
    'ca-key.pem',
    '-out',
    'ca.pem',
    '-days',
    '2',
    '-subj',
    '/CN=drydock test CA',
  );
  writeFileSync(path.join(tls, 'san.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  for (const name of ['server', 'client']) {
    openssl('req', ...key, '-keyout', `${name}-key.pem`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
    openssl(
      'x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca-key.pem', '-CAcreateserial',
      '-out', `${name}.pem`, '-days', '2', '-extfile', 'san.cnf',
    ); // prettier-ignore
  }
  openssl('req', '-x509', ...key, '-keyout', 'stranger-key.pem', '-out', 'stranger.pem', '-subj', '/CN=stranger');
}

/** The connection variables of a client presenting `cert` (none: no client certificate). */
function tlsEnv(cert?: 'client' | 'stranger'): Record<string, string> {
  const tls = path.join(dir, 'tls');
  return {
    TEMPORAL_ADDRESS: address,
    TEMPORAL_TLS_SERVER_CA_CERT_PATH: path.join(tls, 'ca.pem'),
    TEMPORAL_TLS_SERVER_NAME: 'localhost',
    ...(cert
      ? {
          TEMPORAL_TLS_CLIENT_CERT_PATH: path.join(tls, `${cert}.pem`),
          TEMPORAL_TLS_CLIENT_KEY_PATH: path.join(tls, `${cert}-key.pem`),
        }
      : {}),
  };
}

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'drydock-tpg-'));
  own(dir);
  makeCertificates(path.join(dir, 'tls'));
  server = await startTemporalPg(dir, { tls: path.join(dir, 'tls') });
  address = server.address;
}, 20 * 60_000); // the first run on a machine builds the server (minutes); later ones start in seconds

afterAll(async () => {
  await stack?.stop();
  await server?.stop();
});

test('a session runs through Temporal on PostgreSQL over mTLS, and the CLI lists it', async () => {
  const repo = await makeFixtureRepo();
  const settings = loadTemporalSettings(tlsEnv('client'));
  stack = await startStack({ ...settings, DRYDOCK_APPROVAL_REQUIRED: [] });
  const id = newSessionId('tpg');
  const handle = await startSession(stack, id, scriptedSession(repo.url, 'greet', 'echo hello >> README.md'));
  const final = (await handle.result()) as SessionStatus;
  expect(final.phase).toBe('completed');
  expect(git(['rev-parse', `refs/heads/drydock/${id}`], repo.bare).trim()).toBe(final.pushed!.commit);

  // The CLI reads the same variables; its list is a visibility query on drydock's search attributes.
  // Visibility lags the result: polled until it lists the session completed.
  const listed = await pollUntil(
    () => runCli(['list', '--repo', repo.url, '--json'], tlsEnv('client')),
    (out) => out.stdout.includes('"completed"'),
    'the session listed as completed',
    30_000,
  );
  expect(listed.stderr).toBe('');
  expect(JSON.parse(listed.stdout)).toEqual([expect.objectContaining({ sessionId: id, phase: 'completed' })]);
});

test.each([
  [
    'no client certificate',
    undefined,
    /the server requires a client certificate \(mTLS\): set TEMPORAL_TLS_CLIENT_CERT_PATH/,
  ],
  ['a certificate of a CA the server does not trust', 'stranger' as const, /the server refused the client certificate/],
])('with %s, the CLI and a worker stop with one line', async (_, cert, reason) => {
  for (const args of [['list'], ['worker']]) {
    const { code, stdout, stderr } = await runCli(args, tlsEnv(cert));
    expect({ args, code, stdout }).toEqual({ args, code: 1, stdout: '' });
    expect(stderr.trimEnd().split('\n')).toEqual([expect.stringMatching(/^drydock: cannot connect to Temporal at /)]);
    expect(stderr).toContain(`at ${address}: `);
    expect(stderr).toMatch(reason);
  }
});
