/** Where the audit chain's key comes from, and that a process without one outside development mode refuses to start. */
import { statSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { loadAuditKey, rowHash } from '../../store/audit';
import { ConfigError } from '../../platform/config';

let dataDir: string;
const config = (more: Partial<Parameters<typeof loadAuditKey>[0]> = {}) => ({
  DRYDOCK_DATA_DIR: dataDir,
  DRYDOCK_DEV_MODE: false,
  DRYDOCK_AUDIT_KEY: undefined,
  DRYDOCK_AUDIT_KEY_FILE: undefined,
  ...more,
});

beforeEach(async () => {
  dataDir = await mkdtemp(path.join(tmpdir(), 'drydock-audit-key-'));
});

test('without a key outside development mode, loading it fails and names the variable', () => {
  expect(() => loadAuditKey(config())).toThrow(ConfigError);
  expect(() => loadAuditKey(config())).toThrow(/DRYDOCK_AUDIT_KEY/);
});

test('development mode creates <data dir>/audit-key once, mode 0600, and reads the same key afterwards', () => {
  const first = loadAuditKey(config({ DRYDOCK_DEV_MODE: true }));
  const file = path.join(dataDir, 'audit-key');
  expect(statSync(file).mode & 0o777).toBe(0o600);
  expect(first.length).toBe(64);
  expect(loadAuditKey(config())).toEqual(first);
});

test('DRYDOCK_AUDIT_KEY comes first; a key file shorter than 32 characters is refused', () => {
  const file = path.join(dataDir, 'short');
  writeFileSync(file, 'too-short\n');
  expect(() => loadAuditKey(config({ DRYDOCK_AUDIT_KEY_FILE: file }))).toThrow(/shorter than 32/);
  const key = 'k'.repeat(32);
  expect(loadAuditKey(config({ DRYDOCK_AUDIT_KEY: key, DRYDOCK_AUDIT_KEY_FILE: file }))).toEqual(Buffer.from(key));
});

test('the row hash depends on the key', () => {
  const row = {
    sessionId: 's',
    seq: 1,
    key: 's/e',
    kind: 'command',
    at: '2026-01-01T00:00:00.000Z',
    actor: 'agent',
    host: 'h',
    activityId: null,
    attempt: null,
    data: { command: 'ls' },
    prevHash: '0'.repeat(64),
  };
  expect(rowHash(Buffer.from('a'.repeat(32)), row)).not.toBe(rowHash(Buffer.from('b'.repeat(32)), row));
});
