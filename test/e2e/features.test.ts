/**
 * Dev container features (sandbox/features.ts, sandbox/feature-registry.ts)
 * on a real registry (Debian's docker-registry on loopback) with a feature
 * made here and pushed as an OCI artifact: fetched by the worker only from
 * an allowed registry and pinned by digest; refused, naming the field and
 * the setting, from any other; and a dev container using it (with an option,
 * beside a feature from a folder of the repo) snapshotted through the
 * isolated builder (real Docker, gVisor) with a session that sees what the
 * features installed, as the sandbox user. One build: the builder takes
 * minutes (docs/builder.md).
 */
import { WorkflowFailedError } from '@temporalio/client';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { addRepo, listSnapshots, rootCause } from '../../cli/snapshots';
import { resolveFeatures } from '../../sandbox/feature-registry';
import { featureRequests, FeatureError } from '../../sandbox/features';
import { RepoTree } from '../../sandbox/repo-files';
import { repoSlug } from '../../sandbox/snapshots';
import type { SessionStatus } from '../../workflows/api';
import {
  containersOf,
  docker,
  makeFixtureRepo,
  newSessionId,
  scriptedSession,
  startSession,
  startStack,
  type TestStack,
} from '../support/helpers';
import { ImageRegistry } from '../support/image-registry';
import { buildSnapshot, removeSnapshots } from '../support/snapshots';

const BASE = 'debian:trixie-slim';
let registry: ImageRegistry;
let hello: { ref: string; digest: string };

/**
 * A feature made here: a command that greets with its option, the remote user it was told, a containerEnv,
 * and lifecycle commands of its own (each writes a line to /workspace/.lifecycle; postAttachCommand is an editor's;
 * postStartCommand runs at each start of a sandbox).
 */
const HELLO_FEATURE = {
  'devcontainer-feature.json': {
    text: JSON.stringify({
      id: 'hello',
      version: '1.0.0',
      options: { greeting: { type: 'string', default: 'hello' }, loud: { type: 'boolean', default: false } },
      containerEnv: { HELLO_HOME: '/opt/hello' },
      onCreateCommand: 'echo hello-create >> .lifecycle',
      postCreateCommand: ['sh', '-c', 'echo "hello-post $(id -u) $(hello)" >> .lifecycle'],
      postAttachCommand: 'echo attached',
      // At each start of a sandbox, as the sandbox user, before the local feature's (install order).
      postStartCommand: 'echo "hello-start $(id -u)" >> .lifecycle',
    }),
  },
  'install.sh': {
    mode: 0o755,
    text: [
      '#!/bin/sh',
      'set -e',
      'mkdir -p /opt/hello',
      'echo "$_REMOTE_USER $_REMOTE_USER_HOME" > /opt/hello/user',
      '[ "$LOUD" = true ] && GREETING=$(echo "$GREETING" | tr a-z A-Z)',
      'printf \'#!/bin/sh\\necho "%s from a feature, home $HELLO_HOME"\\n\' "$GREETING" > /usr/local/bin/hello',
      'chmod 755 /usr/local/bin/hello',
      '',
    ].join('\n'),
  },
};

/** The local feature's daemon: listens on 127.0.0.1:4555, then forks into the background and answers each caller. */
const TOOL_DAEMON =
  '$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:4555", Listen => 5, ReuseAddr => 1) or die "listen: $!"; ' +
  'exit 0 if fork; while ($c = $s->accept) { print $c "tool daemon up as $<\\n"; close $c }';

beforeAll(async () => {
  registry = await ImageRegistry.start();
  hello = await registry.pushFeature('drydock-test/features/hello', '1', HELLO_FEATURE);
}, 120_000);
afterAll(async () => {
  await registry?.stop();
});

describe("the worker's feature client", () => {
  let root: string;
  beforeEach(async () => {
    root = await mkdtemp(path.join(tmpdir(), 'drydock-features-'));
  });
  afterEach(() => rm(root, { recursive: true, force: true }));

  test('pulls from an allowed registry, pins the layer by digest, and keeps it for sessions, which never pull', async () => {
    const requests = featureRequests({ [hello.ref]: { greeting: 'ahoy' } }, 'devcontainer.json', '.devcontainer');
    const tree = new RepoTree('/nonexistent', 'HEAD'); // a registry feature reads nothing of the repo
    const pulled = await resolveFeatures(requests, { root, repo: 'r', pull: { allowed: [registry.host] } }, tree);
    expect(pulled[0].feature.metadata).toMatchObject({ id: 'hello', containerEnv: { HELLO_HOME: '/opt/hello' } });
    expect(pulled[0].feature.pinned).toMatch(/^sha256:[0-9a-f]{64}$/);
    const install = pulled[0].files.entries['install.sh'];
    expect(install).toMatchObject({ kind: 'file', mode: 0o755 });
    // A session's sandbox does not pull: it finds what the build kept, the same content.
    const kept = await resolveFeatures(requests, { root, repo: 'r' }, tree);
    expect(kept[0].feature.pinned).toBe(pulled[0].feature.pinned);
  });

  test('refuses a registry the operator did not allow, and a feature no build pulled, naming the field', async () => {
    const requests = featureRequests({ [hello.ref]: {} }, 'devcontainer.json', '.devcontainer');
    const tree = new RepoTree('/nonexistent', 'HEAD');
    const refused = resolveFeatures(requests, { root, repo: 'r', pull: { allowed: ['ghcr.io'] } }, tree);
    await expect(refused).rejects.toThrow(
      `devcontainer.json: features["${hello.ref}"]: the feature's registry ${registry.host} is not allowed for r ` +
        `(allowed: ghcr.io): allow it with 'drydock repo add r --allow-registry ${registry.host}' or DRYDOCK_ALLOWED_REGISTRIES`,
    );
    await expect(resolveFeatures(requests, { root, repo: 'r' }, tree)).rejects.toThrow(FeatureError);
    const missing = featureRequests(
      { [`${registry.host}/drydock-test/features/none:1`]: {} },
      'd.json',
      '.devcontainer',
    );
    await expect(
      resolveFeatures(missing, { root, repo: 'r', pull: { allowed: [registry.host] } }, tree),
    ).rejects.toThrow(/features\[".*none:1"\]: the registry answered 404/);
  });
});

describe('a dev container with features, snapshotted and used by a session', () => {
  let stack: TestStack;
  const repos: string[] = [];
  beforeAll(async () => {
    stack = await startStack({ DRYDOCK_APPROVAL_REQUIRED: [] });
  }, 300_000);
  afterAll(async () => {
    if (stack) {
      await removeSnapshots(stack, repos);
      for (const image of await docker.listImages()) {
        if ((image.RepoTags ?? []).some((t) => repos.some((r) => t.includes(repoSlug(r)))))
          await docker
            .getImage(image.Id)
            .remove({ force: true })
            .catch(() => undefined);
      }
    }
    await stack?.stop();
  });

  const devcontainer = (features: Record<string, unknown>) => ({
    '.devcontainer/devcontainer.json': JSON.stringify({ image: BASE, features, postCreateCommand: 'true' }),
  });

  test('an option the feature does not declare is refused at the build, naming the feature and the option', async () => {
    const repo = await makeFixtureRepo(devcontainer({ [hello.ref]: { colour: 'red' } }));
    repos.push(repo.url);
    await addRepo(stack.client, stack.config, repo.url, { every: '1h', allowRegistry: [registry.host] });
    const failed = await buildSnapshot(stack, repo.url).catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(WorkflowFailedError);
    expect(rootCause(failed as Error)).toBe(
      `.devcontainer/devcontainer.json: features["${hello.ref}"].colour: the feature hello has no option "colour" ` +
        '(it declares: greeting, loud): remove it or use one of those',
    );
  }, 300_000);

  test("a feature's postStartCommand that fails ends the session before its first step, naming the feature", async () => {
    const repo = await makeFixtureRepo({
      '.devcontainer/devcontainer.json': JSON.stringify({ image: BASE, features: { './broken': {} } }),
      '.devcontainer/broken/devcontainer-feature.json': JSON.stringify({
        id: 'broken',
        postStartCommand: 'echo "cannot start: no such daemon" >&2; exit 3',
      }),
      '.devcontainer/broken/install.sh': '#!/bin/sh\ntrue\n',
    });
    repos.push(repo.url);
    await addRepo(stack.client, stack.config, repo.url, { every: '1h', setup: 'true' });
    expect(await buildSnapshot(stack, repo.url)).toMatchObject({ status: 'ready' });
    const id = newSessionId('feature-start');
    const handle = await startSession(stack, id, scriptedSession(repo.url, 'never runs', 'touch ran'));
    await handle.result().catch(() => undefined);
    expect(await containersOf(id)).toHaveLength(0);
    const final: SessionStatus = await handle.query('status');
    expect(final.phase).toBe('failed');
    expect(final.error).toBe(
      "the postStartCommand of the dev container's feature ./broken exited with status 3; " +
        'its output ends: cannot start: no such daemon',
    );
    expect(final.timeline.some((t) => t.name.startsWith('step 1'))).toBe(false);
  }, 900_000);

  test("the features' results are in the session's sandbox: a registry feature with options, a local one", async () => {
    const repo = await makeFixtureRepo({
      '.devcontainer/devcontainer.json': JSON.stringify({
        image: BASE,
        features: { [hello.ref]: { greeting: 'ahoy', loud: true }, './tool': {} },
        // Accepted, run as the sandbox user: said in the snapshot's status, not only in the worker's log.
        remoteUser: 'root',
        onCreateCommand: 'echo own-create >> .lifecycle',
        postCreateCommand: 'echo own-post >> .lifecycle',
      }),
      '.devcontainer/tool/devcontainer-feature.json': JSON.stringify({
        id: 'tool',
        installsAfter: [hello.ref],
        postCreateCommand: 'echo tool-post >> .lifecycle',
        // A daemon, as features start them: it listens, goes to the background, and serves the session's steps.
        postStartCommand: ['perl', '-MIO::Socket::INET', '-e', TOOL_DAEMON],
      }),
      // Installed after hello (installsAfter): it can use what hello installed.
      '.devcontainer/tool/install.sh': '#!/bin/sh\nset -e\nhello > /opt/tool-saw\n',
    });
    repos.push(repo.url);
    await addRepo(stack.client, stack.config, repo.url, { every: '1h', allowRegistry: [registry.host] });
    const built = await buildSnapshot(stack, repo.url);
    expect(built).toMatchObject({ status: 'ready' });
    const rootNote = expect.stringMatching(
      /^\.devcontainer\/devcontainer\.json: remoteUser: root is not given: a sandbox runs as the sandbox user/,
    );
    expect(built.notes).toEqual([rootNote]);
    // And `drydock snapshot list` says it under the build.
    const printed: string[] = [];
    const spy = jest.spyOn(console, 'log').mockImplementation((line: string) => void printed.push(line));
    await listSnapshots(stack.config, repo.url, false).finally(() => spy.mockRestore());
    expect(printed.join('\n')).toMatch(
      /ready .*\n {2}note: \.devcontainer\/devcontainer\.json: remoteUser: root is not given/,
    );

    const id = newSessionId('features');
    const handle = await startSession(
      stack,
      id,
      scriptedSession(
        repo.url,
        'use the features',
        'id -u; hello; cat /opt/hello/user /opt/tool-saw .lifecycle; ' +
          'bash -c "exec 3<>/dev/tcp/127.0.0.1/4555 && cat <&3"',
      ),
    );
    await handle.result().catch(() => undefined);
    expect(await containersOf(id)).toHaveLength(0);
    const final: SessionStatus = await handle.query('status');
    const output = final.timeline.find((t) => t.name.startsWith('step 1'))?.outputTail ?? '';
    expect(final.phase).toBe('completed');
    expect(output.trim().split('\n')).toEqual([
      '1000',
      'AHOY from a feature, home /opt/hello',
      'root /root',
      'AHOY from a feature, home /opt/hello',
      // Setup: the features' lifecycle commands before the dev container's own, hook by hook, in install order,
      // as the sandbox user (the Dev Container CLI's order); the snapshot kept what they wrote.
      'hello-create',
      'own-create',
      'hello-post 1000 AHOY from a feature, home /opt/hello',
      'tool-post',
      'own-post',
      // At the sandbox's start, after setup and before the first step: the features' postStartCommands in
      // install order, as the sandbox user; the daemon one started still serves during the step.
      'hello-start 1000',
      'tool daemon up as 1000',
    ]);
  }, 900_000);
});
