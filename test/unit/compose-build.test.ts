/**
 * A compose service's `build:` (sandbox/compose.ts, sandbox/service-build.ts)
 * and the BuildKit syntax the isolated builder takes (sandbox/dockerfile-bases.ts):
 * what is honoured becomes the build drydock runs, what cannot be is refused
 * naming `services.<name>.build.<field>` (or the Dockerfile's line), never dropped.
 */
import { createLogger } from '../../platform/log';
import { collectEnvironmentImages } from '../../sandbox/activities/environment';
import { ComposeError, parseComposeFiles } from '../../sandbox/compose';
import { dockerfileBases, withoutCopyLink } from '../../sandbox/dockerfile-bases';
import { repoMadeImage } from '../../workflows/rules/images';
import { parseDevcontainer } from '../../sandbox/repo-image';
import { ownServiceBuild, SERVICE_BUILD_KIND, SERVICE_BUILD_LABELS } from '../../sandbox/service-build';
import { SERVICES_LABEL } from '../../sandbox/services';
import { repoSlug } from '../../sandbox/snapshots';

const COMPOSE = '.devcontainer/compose.yaml';
const APP = '  app:\n    image: drydock-base:1\n';

/** The stack of a compose file whose dev service is `app`, with other repo files (.env, env_files). */
function stack(services: string, files: Record<string, string> = {}) {
  const all: Record<string, string> = { [COMPOSE]: `services:\n${APP}${services}`, ...files };
  return parseComposeFiles([COMPOSE], (f) => all[f], { devService: 'app' });
}
function problems(services: string, files: Record<string, string> = {}): string[] {
  try {
    stack(services, files);
    return [];
  } catch (err) {
    if (!(err instanceof ComposeError)) throw err;
    return err.problems;
  }
}

describe("a service's build:", () => {
  test('a folder: its Dockerfile, the context relative to the compose file; named by the service until built', () => {
    const [db] = stack('  db:\n    build: ./db\n    environment: { POSTGRES_PASSWORD: pw }\n').services;
    expect(db).toMatchObject({
      name: 'db',
      image: 'db',
      environment: { POSTGRES_PASSWORD: 'pw' },
      build: { context: '.devcontainer/db', dockerfile: '.devcontainer/db/Dockerfile', args: {} },
    });
  });

  test('{context, dockerfile, args (map and list, a bare one from .env), target} and an image name beside it', () => {
    const text = [
      '  api:',
      '    image: example/api:dev',
      '    build:',
      '      context: ..',
      '      dockerfile: docker/api.Dockerfile',
      '      target: dev',
      '      args: [NODE=22, FROM_ENV, MISSING]',
      '      labels: { team: x }',
      '      cache_from: [example/api:cache]',
      '  web:',
      '    build: { context: ../web, args: { MODE: prod, TOKEN: null } }',
      '',
    ].join('\n');
    const [api, web] = stack(text, { '.devcontainer/.env': 'FROM_ENV=yes\nTOKEN=t\n' }).services;
    expect(api.image).toBe('example/api:dev');
    expect(api.build).toEqual({
      context: '',
      dockerfile: 'docker/api.Dockerfile',
      args: { NODE: '22', FROM_ENV: 'yes' },
      target: 'dev',
    });
    expect(web.build).toEqual({ context: 'web', dockerfile: 'web/Dockerfile', args: { MODE: 'prod', TOKEN: 't' } });
  });

  test('dockerfile_inline is the Dockerfile, built in its context', () => {
    const [cache] = stack(
      '  cache:\n    build:\n      context: .\n      dockerfile_inline: |\n        FROM redis:8\n        RUN true\n',
    ).services;
    expect(cache.build).toEqual({ context: '.devcontainer', inline: 'FROM redis:8\nRUN true\n', args: {} });
  });

  test.each([
    ['{ context: ., ssh: [default] }', /^\S+: services\.db\.build\.ssh: the isolated builder has no SSH agent/],
    ['{ context: ., secrets: [npmrc] }', /services\.db\.build\.secrets: the isolated builder is given no secrets/],
    ['{ context: ., additional_contexts: { x: ../x } }', /services\.db\.build\.additional_contexts: .*one context/],
    ['{ context: ., network: host }', /services\.db\.build\.network: a build reaches only drydock's egress proxy/],
    ['{ context: ., privileged: true }', /services\.db\.build\.privileged: builds run without extra privileges/],
    ['{ context: ., frobnicate: 1 }', /services\.db\.build\.frobnicate: not supported by drydock/],
    [
      'https://github.com/org/db.git#main',
      /services\.db\.build\.context: "https:\/\/github\.com\/org\/db\.git#main" is a remote context, which drydock does not fetch/,
    ],
    ['{ context: "git@github.com:org/db.git" }', /services\.db\.build\.context: .* is a remote context/],
    ['{ context: ../.. }', /services\.db\.build\.context: "\.\.\/\.\." is outside the repository/],
    ['{ context: ., dockerfile: /etc/Dockerfile }', /services\.db\.build\.dockerfile: "\/etc\/Dockerfile" is outside/],
    ['{ context: ., target: "a b" }', /services\.db\.build\.target: the name of a stage of the Dockerfile/],
    [
      '{ context: ., dockerfile: D, dockerfile_inline: "FROM x" }',
      /services\.db\.build\.dockerfile_inline: .*not beside/,
    ],
    ['[1, 2]', /services\.db\.build: expected a folder or \{context, dockerfile, args, target\}/],
  ])('build: %s is refused, naming the field', (build, message) => {
    const found = problems(`  db:\n    build: ${build}\n`);
    expect(found).toEqual([expect.stringMatching(message)]);
  });

  test("the dev service's build takes its target; its dockerfile_inline is refused, named", () => {
    const dev = parseComposeFiles(
      [COMPOSE],
      (f) =>
        f === COMPOSE
          ? 'services:\n  app:\n    build: { context: .., dockerfile: Dockerfile, target: dev }\n'
          : undefined,
      { devService: 'app' },
    ).dev;
    expect(dev).toMatchObject({ context: '', dockerfile: 'Dockerfile', target: 'dev', args: {} });
    expect(() =>
      parseComposeFiles(
        [COMPOSE],
        (f) => (f === COMPOSE ? 'services:\n  app:\n    build: { dockerfile_inline: "FROM x" }\n' : undefined),
        {
          devService: 'app',
        },
      ),
    ).toThrow(/services\.app\.build\.dockerfile_inline: the dev container's Dockerfile is built from a file/);
  });
});

describe("a built service's image", () => {
  const labels = (repo: string) => ({
    [SERVICE_BUILD_LABELS.image]: SERVICE_BUILD_KIND,
    [SERVICE_BUILD_LABELS.repo]: repoSlug(repo),
    [SERVICE_BUILD_LABELS.name]: 'db',
  });

  test("is a repository's: no repository may start from it or name it", () => {
    expect(repoMadeImage('drydock-svc-x:db-1', labels('https://example.com/a.git'))).toMatch(
      /made by drydock from a repository \(a repository's compose service build\)/,
    );
  });

  test("drydock's own service images (drydock/postgres:17) stay anyone's", () => {
    expect(repoMadeImage('drydock/postgres:17', { 'drydock.image': 'service', 'drydock.service': 'postgres' })).toBe(
      undefined,
    );
  });

  test('runs as a service of the repo that built it, and of no other', () => {
    expect(ownServiceBuild(labels('https://example.com/a.git'), 'https://example.com/a.git')).toBe(true);
    expect(ownServiceBuild(labels('https://example.com/a.git'), 'https://example.com/b.git')).toBe(false);
    expect(ownServiceBuild(labels('https://example.com/a.git'), undefined)).toBe(false);
    // An environment image with a forged service label is not a service build.
    const forged = { ...labels('https://example.com/a.git'), 'drydock.image': 'environment' };
    expect(ownServiceBuild(forged, 'https://example.com/a.git')).toBe(false);
  });
});

describe('BuildKit syntax in the isolated builder', () => {
  test('COPY --link and ADD --link are plain copies; nothing else changes', () => {
    const text = [
      '# syntax=docker/dockerfile:1.7',
      'FROM --platform=$BUILDPLATFORM debian:trixie-slim AS build',
      'COPY --link --chown=1:1 a /a',
      'add \\',
      '  --link=true \\',
      '  b /b',
      'RUN echo --link > /x',
      'COPY --from=build --link=false /a /c',
      '',
    ].join('\r\n');
    expect(withoutCopyLink(text)).toBe(
      [
        '# syntax=docker/dockerfile:1.7',
        'FROM --platform=$BUILDPLATFORM debian:trixie-slim AS build',
        'COPY --chown=1:1 a /a',
        'add \\',
        '  \\',
        '  b /b',
        'RUN echo --link > /x',
        'COPY --from=build /a /c',
        '',
      ].join('\r\n'),
    );
  });

  test('with the escape directive, a backtick continues the COPY', () => {
    expect(withoutCopyLink('# escape=`\nFROM x\nCOPY `\n  --link a /a\nRUN --link\n')).toBe(
      '# escape=`\nFROM x\nCOPY `\n  a /a\nRUN --link\n',
    );
  });

  test('RUN --mount: cache and bind are the builder\'s; an image a mount reads "from" is handed over like a FROM', () => {
    const text = [
      'FROM debian:trixie-slim AS base',
      'RUN --mount=type=cache,target=/var/cache/apt --mount=type=bind,from=base,source=/etc,target=/e true',
      'RUN --mount=type=bind,from=node:22,source=/usr/local/bin/node,target=/n /n -v',
    ].join('\n');
    expect(dockerfileBases(text, {})).toEqual([
      { ref: 'debian:trixie-slim', instruction: 'FROM', line: 1 },
      { ref: 'node:22', instruction: 'RUN --mount from', line: 3 },
    ]);
  });

  test.each([
    ['--mount=type=secret,id=npmrc', /^line 2: RUN --mount=type=secret: the isolated builder is given no secrets/],
    ['--mount=type=ssh', /^line 2: RUN --mount=type=ssh: the isolated builder has no SSH agent/],
  ])('RUN %s is refused, naming the line and the mount', (mount, message) => {
    const found = dockerfileBases(`FROM debian:trixie-slim\nRUN ${mount} true\n`, {});
    expect(found).toEqual({ problem: expect.stringMatching(message) });
  });
});

describe("devcontainer.json's build", () => {
  test('target is the stage built; cacheFrom is a hint the builder does without', () => {
    const env = parseDevcontainer(
      '{"build": {"dockerfile": "Dockerfile", "target": "dev", "cacheFrom": "x:1"}}',
      '.devcontainer/devcontainer.json',
    );
    expect(env).toMatchObject({ dockerfile: '.devcontainer/Dockerfile', target: 'dev' });
  });

  test('a field it does not know is refused, named', () => {
    expect(() =>
      parseDevcontainer(
        '{"build": {"dockerfile": "D", "options": ["--network=host"]}}',
        '.devcontainer/devcontainer.json',
      ),
    ).toThrow(/^\.devcontainer\/devcontainer\.json: build: .*options/);
  });
});

describe("a repo's old service builds", () => {
  test('are removed once replaced, but those a kept snapshot runs', async () => {
    const url = 'https://example.com/app.git';
    const name = `drydock-svc-${repoSlug(url)}`;
    const recorded = (image: string) =>
      JSON.stringify([
        { name: 'api', image, environment: {}, ports: [], data: [], dependsOn: [], limits: {}, source: 'api' },
      ]);
    const images: Record<string, Record<string, string>> = {
      'snap:new': { [SERVICES_LABEL]: recorded(`${name}:api-new`) },
      'snap:old': { [SERVICES_LABEL]: recorded(`${name}:api-kept`) },
    };
    const removed: string[] = [];
    const deps = {
      hostId: 'h',
      log: createLogger('silent'),
      snapshots: {
        ready: () =>
          Promise.resolve([{ image: 'snap:new', startedAt: new Date(2000).toISOString() }, { image: 'snap:old' }]),
      },
      sandboxes: {
        name: 'fake',
        imageStore: {
          image: (ref: string) => Promise.resolve(images[ref] ? { labels: images[ref] } : undefined),
          images: (refs: string[]) =>
            Promise.resolve(
              refs.includes(name)
                ? ['api-gone', 'api-kept', 'api-new'].map((t) => ({ id: t, tags: [`${name}:${t}`], createdMs: 1000 }))
                : [],
            ),
          removeImage: (tag: string) => {
            removed.push(tag);
            return Promise.resolve('removed');
          },
        },
      },
    };
    await collectEnvironmentImages(deps as never, url);
    expect(removed).toEqual([`${name}:api-gone`]);
  });
});
