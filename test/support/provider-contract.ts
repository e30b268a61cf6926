/**
 * The provider contract: what every sandbox provider must do the same way,
 * whatever runs its sandboxes. Run against the Docker provider and the
 * test-only API provider (test/e2e/provider-contract.test.ts) and the
 * Kubernetes provider (test/e2e/k8s-sandbox.test.ts): exec with stdout and
 * stderr apart, exit codes, stdin and extra environment; the output caps, to
 * memory and to a file; a tar copied in, a helper attached in lines, a shell
 * on a TTY; a sandbox removed mid-command found gone by every later call; its
 * companions removed with it.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { HOME, SandboxNotFound, type SandboxProvider, type SandboxSpec } from '../../sandbox/provider';

const MiB = 1024 ** 2;

export interface ContractSubject {
  provider(): SandboxProvider;
  /** A sandbox spec of this name that the provider can make. */
  spec(name: string): Promise<SandboxSpec>;
}

async function waitUntil(ok: () => boolean, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The contract's tests, inside the caller's describe. */
export function providerContract(subject: ContractSubject): void {
  const name = `drydock-contract-${randomBytes(3).toString('hex')}`;
  let dir = '';
  const sandboxes = () => subject.provider();
  const sh = async (sandbox: string, script: string, opts = {}) => {
    const r = await sandboxes().exec(sandbox, ['sh', '-c', script], opts);
    return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
  };
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'drydock-contract-'));
    await sandboxes().create(await subject.spec(name));
  });
  afterAll(async () => {
    await sandboxes().destroy(name);
    await rm(dir, { recursive: true, force: true });
  });

  test('contract: exec with stdout and stderr apart, exit codes, stdin, extra environment never in argv', async () => {
    expect(await sh(name, 'echo out; echo err >&2; exit 3')).toEqual({ code: 3, out: 'out\n', err: 'err\n' });
    const missing = await sandboxes().exec(name, ['no-such-command']);
    // The runtime could not start it: 127 (Kubernetes) or 126 (Docker), with its reason.
    expect([126, 127]).toContain(missing.exitCode);
    expect(missing.stderr.toString() + missing.stdout.toString()).toMatch(/not found|no such file/i);
    const secret = `s3cr3t-${randomBytes(8).toString('hex')}`;
    const value = `a\\b\nc ${secret}`;
    const seen = await sh(name, 'printf "[%s]" "$V"; echo; cat; cat /proc/[0-9]*/cmdline | tr "\\0" " "', {
      env: [`V=${value}`, 'EMPTY='],
      stdin: 'the input\n',
    });
    const [first, second, ...rest] = seen.out.split('\n');
    expect(`${first}\n${second}`).toBe(`[${value}]`);
    expect(rest[0]).toBe('the input');
    expect(rest.slice(1).join('\n')).not.toContain(secret);
    const npm = await sandboxes().exec(name, ['env'], { env: ['npm_config_https-proxy=p'] });
    expect(npm.stdout.toString().split('\n')).toContain('npm_config_https-proxy=p');
  });

  test('contract: output past its cap throws, to memory or to a file; a file gets it all below', async () => {
    const cap = { bytes: MiB, what: 'the test output' };
    await expect(
      sandboxes().exec(name, ['head', '-c', String(2 * MiB), '/dev/zero'], { stdoutCap: cap }),
    ).rejects.toThrow(/the test output is over/);
    const file = path.join(dir, 'out.bin');
    await expect(sandboxes().execToFile(name, ['head', '-c', String(2 * MiB), '/dev/zero'], file, cap)).rejects.toThrow(
      /over/,
    );
    const ok = await sandboxes().execToFile(name, ['head', '-c', String(MiB - 1), '/dev/urandom'], file, cap);
    expect(ok).toMatchObject({ exitCode: 0, bytes: MiB - 1 });
  });

  test('contract: a tar copied in, a helper attached in lines, a shell on a TTY', async () => {
    const tar = spawn('tar', ['-C', path.join(__dirname, '..', 'fixtures'), '-cf', '-', '.']).stdout;
    await sandboxes().copyIn(name, tar, '/workspace');
    // Who owns what is unpacked is the provider's (Docker: the tar's headers; the others: the sandbox user).
    expect((await sh(name, 'ls /workspace/histories | head -1')).out).toMatch(/^\S+\n$/);

    const helper = await sandboxes().attach(name, ['sh', '-c', 'while read -r l; do echo "got $l"; done']);
    const lines: string[] = [];
    helper.stdout.on('data', (c: Buffer) => lines.push(...c.toString().trim().split('\n')));
    helper.stdin.write('one\ntwo\n');
    await waitUntil(() => lines.length === 2);
    helper.close();
    expect(lines).toEqual(['got one', 'got two']);

    await sh(name, `mkdir -p ${HOME} 2>/dev/null; echo "touch ${HOME}/ran" > ${HOME}/.profile || true`);
    const shell = await sandboxes().shell(name, { cols: 100, rows: 30, term: 'xterm' });
    let screen = '';
    shell.stream.on('data', (c: Buffer) => (screen += c.toString()));
    await shell.resize({ cols: 120, rows: 40 });
    // Kubernetes applies a resize in its own time (its exec stream's resize channel has no answer: beside
    // a busy neighbour the shell ran the next line at 0 0), so the shell waits up to 5 s for the size
    // (spelled as arithmetic: the terminal's echo of this line must not match the size expected below).
    shell.stream.write(
      'i=0; while [ "$(stty size)" != "$((4*10)) $((12*10))" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done; ' +
        'stty size; echo "$TERM $(id -u) $(pwd)"; exit 7\n',
    );
    expect(await shell.exitCode()).toBe(7);
    expect(screen).toMatch(/40 120/);
    expect(screen).toMatch(/xterm 1000 \/workspace/);
    expect((await sh(name, `ls -A ${HOME} 2>/dev/null || true`)).out).not.toMatch(/^ran/m);
  });

  test('contract: a sandbox removed mid-command ends it as SandboxNotFound, and so does every later call', async () => {
    const gone = `drydock-contract-gone-${randomBytes(3).toString('hex')}`;
    await sandboxes().create(await subject.spec(gone));
    const running = sandboxes().exec(gone, ['sh', '-c', 'echo started; sleep 60']);
    await new Promise((r) => setTimeout(r, 1_000));
    expect(await sandboxes().destroy(gone)).toBe(true);
    await expect(running).rejects.toBeInstanceOf(SandboxNotFound);
    await expect(sandboxes().exec(gone, ['true'])).rejects.toBeInstanceOf(SandboxNotFound);
    await expect(sandboxes().attach(gone, ['cat'])).rejects.toBeInstanceOf(SandboxNotFound);
    await expect(sandboxes().copyIn(gone, new PassThrough().end(), '/workspace')).rejects.toBeInstanceOf(
      SandboxNotFound,
    );
    expect(await sandboxes().destroy(gone)).toBe(false);
    expect(await sandboxes().exists(gone)).toBe(false);
  });

  test("contract: removing a sandbox removes the companions that joined it (a check's browser): teardown's one call", async () => {
    if (!sandboxes().capabilities.lateCompanions) return; // no companion joins a sandbox of this provider
    const host = `drydock-contract-host-${randomBytes(3).toString('hex')}`;
    const companion = `${host}-browser`;
    await sandboxes().create(await subject.spec(host));
    await sandboxes().create({ ...(await subject.spec(companion)), companionOf: host });
    expect(await sandboxes().exists(companion)).toBe(true);
    expect(await sandboxes().destroy(host)).toBe(true);
    expect(await sandboxes().exists(companion)).toBe(false);
  });
}
