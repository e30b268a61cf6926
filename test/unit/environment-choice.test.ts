/** Who decides a repo's environment (workflows/rules/environment-choice.ts): the operator, then the repo file, then the repo. */
import {
  chooseEnvironment,
  conflictingFlags,
  environmentFiles,
  parseEnvironmentSetting,
  type EnvironmentChoice,
} from '../../workflows/rules/environment-choice';

const DEVCONTAINER = '.devcontainer/devcontainer.json';
const both = new Set([DEVCONTAINER, 'Dockerfile']);

function choice(...args: Parameters<typeof chooseEnvironment>): EnvironmentChoice {
  const chosen = chooseEnvironment(...args);
  if (!chosen.ok) throw new Error(chosen.refusal);
  return chosen.choice;
}

describe('precedence', () => {
  test('without a setting of the operator: the repo file, then the dev container, else the base image', () => {
    expect(choice(undefined, { dockerfile: 'ci/Dockerfile', context: 'ci' }, both)).toMatchObject({
      kind: 'dockerfile',
      file: 'ci/Dockerfile',
      context: 'ci',
      by: '.drydock/config.yaml',
    });
    expect(choice(undefined, undefined, both)).toMatchObject({ kind: 'devcontainer', file: DEVCONTAINER });
    expect(choice(undefined, undefined, new Set(['Dockerfile']))).toMatchObject({ kind: 'base' });
  });

  test("the operator's base or image wins over a dev container and over the repo file's choice", () => {
    for (const file of [undefined, { dockerfile: 'Dockerfile' }, { devcontainer: DEVCONTAINER }]) {
      expect(choice({ environment: 'base' }, file, both)).toMatchObject({ kind: 'base' });
      expect(choice({ environment: 'image:python:3.12' }, file, both)).toEqual({
        kind: 'image',
        image: 'python:3.12',
        by: "the operator's setting (repo add --environment image:python:3.12)",
      });
    }
  });

  test("the operator's dockerfile wins over the dev container; the repo file's Dockerfile and context are the ones built", () => {
    expect(choice({ environment: 'dockerfile' }, undefined, both)).toMatchObject({
      kind: 'dockerfile',
      file: 'Dockerfile',
    });
    expect(
      choice(
        { environment: 'dockerfile' },
        { dockerfile: 'docker/dev.Dockerfile', context: '.' },
        new Set(['docker/dev.Dockerfile']),
      ),
    ).toMatchObject({ kind: 'dockerfile', file: 'docker/dev.Dockerfile', context: '.' });
  });

  test("the operator's devcontainer wins over the repo file's Dockerfile", () => {
    expect(choice({ environment: 'devcontainer' }, { dockerfile: 'Dockerfile' }, both)).toMatchObject({
      kind: 'devcontainer',
      file: DEVCONTAINER,
    });
  });

  test('--ignore-devcontainer: the dev container is never read, a Dockerfile the repo file names still is', () => {
    expect(choice({ ignoreDevcontainer: true }, undefined, both)).toMatchObject({
      kind: 'base',
      by: "the operator's setting (repo add --ignore-devcontainer)",
    });
    expect(choice({ ignoreDevcontainer: true }, { devcontainer: '.devcontainer/ci.json' }, both)).toMatchObject({
      kind: 'base',
    });
    expect(choice({ ignoreDevcontainer: true }, { dockerfile: 'Dockerfile' }, both)).toMatchObject({
      kind: 'dockerfile',
    });
  });
});

describe('refusals name the setting', () => {
  test("the operator's choice of a file the repo lacks", () => {
    expect(chooseEnvironment({ environment: 'devcontainer' }, undefined, new Set(['Dockerfile']))).toEqual({
      ok: false,
      refusal:
        "the operator's setting (repo add --environment devcontainer): .devcontainer/devcontainer.json is not in the repository; " +
        'register the repo again with another --environment (devcontainer, dockerfile, base or image:<ref>)',
    });
    expect(chooseEnvironment({ environment: 'dockerfile' }, undefined, new Set([DEVCONTAINER]))).toMatchObject({
      ok: false,
      refusal: expect.stringContaining('repo add --environment dockerfile): Dockerfile is not in the repository'),
    });
  });

  test("the repo file's dev container that is not there", () => {
    expect(chooseEnvironment(undefined, { devcontainer: '.devcontainer/ci.json' }, both)).toEqual({
      ok: false,
      refusal: '.devcontainer/ci.json: not in the repository (named in .drydock/config.yaml environment.devcontainer)',
    });
  });

  test('the files looked up are the ones the repo file names, else the defaults', () => {
    expect(environmentFiles(undefined)).toEqual([DEVCONTAINER, 'Dockerfile']);
    expect(environmentFiles({ devcontainer: 'a/b.json', dockerfile: 'c/Dockerfile' })).toEqual([
      'a/b.json',
      'c/Dockerfile',
    ]);
  });
});

describe('the flags', () => {
  test('each kind is accepted; anything else, and a malformed image, is refused naming --environment', () => {
    for (const v of ['devcontainer', 'dockerfile', 'base', 'image:ghcr.io/org/app:1.2']) {
      expect(parseEnvironmentSetting(v)).toEqual({ ok: true, setting: v });
    }
    expect(parseEnvironmentSetting('compose')).toEqual({
      ok: false,
      problem: '--environment: expected devcontainer, dockerfile, base or image:<ref>, got "compose"',
    });
    expect(parseEnvironmentSetting('image:Not An Image')).toMatchObject({
      ok: false,
      problem: expect.stringMatching(/^--environment image:Not An Image: .* is not an image reference/),
    });
  });

  test('--ignore-devcontainer with --environment devcontainer is a contradiction', () => {
    expect(conflictingFlags({ environment: 'devcontainer', ignoreDevcontainer: true })).toMatch(/contradict/);
    expect(conflictingFlags({ environment: 'base', ignoreDevcontainer: true })).toBeUndefined();
  });
});
