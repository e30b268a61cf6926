/** Credentials in repository URLs never reach messages, labels or records. */
import { git, GitError } from '../../repos/git';
import { sandboxCreateOptions } from '../../sandbox/docker/create-options';
import { redactUrl } from '../../workflows/rules/repo-url';
import { cpuMs } from '../support/cpu-time';

const SECRET = 'ghs_s3cr3tT0kenValue';

test.each([
  [`https://oauth2:${SECRET}@github.com/acme/app.git`, 'https://github.com/acme/app.git'],
  [`https://${SECRET}@github.com/acme/app`, 'https://github.com/acme/app'],
  [
    `fatal: unable to access 'http://u:${SECRET}@127.0.0.1:9/x.git/': refused`,
    "fatal: unable to access 'http://127.0.0.1:9/x.git/': refused",
  ],
  ['https://github.com/acme/app.git', 'https://github.com/acme/app.git'],
  ['git@github.com:acme/app.git', 'git@github.com:acme/app.git'],
  ['file:///srv/repos/app.git', 'file:///srv/repos/app.git'],
  ['mail me at a@b.c', 'mail me at a@b.c'],
])('redactUrl(%j) is %j', (url, shown) => {
  expect(redactUrl(url)).toBe(shown);
});

test('redactUrl is linear on long inputs without an "@" (CPU time)', async () => {
  const used = await cpuMs(() => {
    redactUrl('https://'.repeat(200_000));
    redactUrl(`https://${'a'.repeat(1_000_000)}`);
    redactUrl('a'.repeat(1_000_000));
  });
  expect(used).toBeLessThan(2_000);
});

test("a git failure's message, args and stderr hold no URL credentials", async () => {
  // Port 9 on loopback: nothing listens, git fails at once.
  const err = await git(['ls-remote', '--', `http://oauth2:${SECRET}@127.0.0.1:9/acme/app.git`]).catch((e) => e);
  expect(err).toBeInstanceOf(GitError);
  expect(err.message).toContain('127.0.0.1:9/acme/app.git');
  expect(`${err.message} ${err.args.join(' ')} ${err.stderr}`).not.toContain(SECRET);
});

test('container and volume labels hold no URL credentials', () => {
  const options = sandboxCreateOptions(
    {
      name: 'drydock-s',
      image: 'drydock-base:x',
      labels: { 'drydock.session': 's', 'drydock.repo': `https://oauth2:${SECRET}@github.com/acme/app.git` },
      cpus: 1,
      memoryBytes: 1024 ** 3,
      pids: 100,
      tmpBytes: 1024 ** 2,
      diskBytes: 1024 ** 3,
      egressDir: '/data/egress/abc',
    },
    { workspace: { lower: '/l', upper: '/u', work: '/w' }, home: { lower: '/l', upper: '/u', work: '/w' } },
  );
  expect(options.Labels!['drydock.repo']).toBe('https://github.com/acme/app.git');
  expect(JSON.stringify(options)).not.toContain(SECRET);
});
