/** Which extra CAs `drydock up` gives sandboxes (sandbox/ca.ts): the operator's, Node's, the machine's own, or none. */
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { devStackExtraCa, machineExtraCa } from '../../sandbox/ca';

const PEM = (n: string) => `-----BEGIN CERTIFICATE-----\n${n}\n-----END CERTIFICATE-----\n`;
const COMBINED = '/data/machine-ca-certificates.pem';

describe('devStackExtraCa', () => {
  test('DRYDOCK_EXTRA_CA_CERTS wins over everything the machine has', () => {
    expect(
      devStackExtraCa(
        { configured: '/etc/corp.pem', nodeExtra: { file: '/n.pem', pem: true }, machineCas: ['/m/a.crt'] },
        COMBINED,
      ),
    ).toEqual({
      file: '/etc/corp.pem',
      line: 'sandboxes trust the extra CAs in /etc/corp.pem (DRYDOCK_EXTRA_CA_CERTS)',
    });
  });

  test('then NODE_EXTRA_CA_CERTS, as this process trusts it, and the line says how to choose another', () => {
    const chosen = devStackExtraCa({ nodeExtra: { file: '/n.pem', pem: true }, machineCas: ['/m/a.crt'] }, COMBINED);
    expect(chosen.file).toBe('/n.pem');
    expect(chosen.line).toBe(
      "sandboxes trust the extra CAs this machine's Node.js does: /n.pem (NODE_EXTRA_CA_CERTS) (DRYDOCK_EXTRA_CA_CERTS chooses another file)",
    );
  });

  test("then the machine's own CAs, combined into one file; a NODE_EXTRA_CA_CERTS without a certificate does not count", () => {
    const chosen = devStackExtraCa(
      { nodeExtra: { file: '/empty.pem', pem: false }, machineCas: ['/usr/local/share/ca-certificates/corp.crt'] },
      COMBINED,
    );
    expect(chosen).toMatchObject({ file: COMBINED, from: 'machine-cas' });
    expect(chosen.line).toContain('corp.crt in /usr/local/share/ca-certificates');
  });

  test('none: said so, with the setting to use when the network intercepts TLS', () => {
    const chosen = devStackExtraCa({ nodeExtra: { file: '/empty.pem', pem: false }, machineCas: [] }, COMBINED);
    expect(chosen.file).toBeUndefined();
    expect(chosen.line).toMatch(
      /no extra CA \(NODE_EXTRA_CA_CERTS \/empty\.pem holds no PEM certificate\).*DRYDOCK_EXTRA_CA_CERTS/,
    );
  });
});

describe('machineExtraCa', () => {
  test("writes the machine's own CA files as one PEM, skipping what holds no certificate", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'drydock-ca-'));
    const cas = path.join(dir, 'cas');
    await mkdir(path.join(cas, 'corp'), { recursive: true });
    await writeFile(path.join(cas, 'corp', 'root.crt'), PEM('root'));
    await writeFile(path.join(cas, 'a.crt'), PEM('a'));
    await writeFile(path.join(cas, 'notes.crt'), 'not a certificate');
    const combined = path.join(dir, 'combined.pem');
    const chosen = await machineExtraCa(
      undefined,
      { NODE_EXTRA_CA_CERTS: path.join(dir, 'missing.pem') },
      combined,
      cas,
    );
    expect(chosen.file).toBe(combined);
    expect(await readFile(combined, 'utf8')).toBe(PEM('a') + PEM('root'));
  });

  test("NODE_EXTRA_CA_CERTS's file, when it holds a certificate; DRYDOCK_EXTRA_CA_CERTS before it", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'drydock-ca-'));
    const node = path.join(dir, 'node.pem');
    await writeFile(node, PEM('node'));
    const none = path.join(dir, 'no-cas');
    expect((await machineExtraCa(undefined, { NODE_EXTRA_CA_CERTS: node }, path.join(dir, 'c.pem'), none)).file).toBe(
      node,
    );
    expect((await machineExtraCa('/etc/corp.pem', { NODE_EXTRA_CA_CERTS: node }, 'c.pem', none)).file).toBe(
      '/etc/corp.pem',
    );
    expect((await machineExtraCa(undefined, {}, path.join(dir, 'c.pem'), none)).file).toBeUndefined();
  });
});
