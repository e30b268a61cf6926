/**
 * devcontainer.json's runArgs, mounts and other properties (sandbox/devcontainer-run.ts):
 * each honoured (an environment variable, an env file of the repo), harmless, or
 * refused naming the field and what to do; never dropped in silence.
 */
import { declaredStack } from '../../sandbox/activities/services';
import { propertyProblems, runSettingsOf } from '../../sandbox/devcontainer-run';
import { hostLayer, parseDevcontainer } from '../../sandbox/repo-image';

const SOURCE = '.devcontainer/devcontainer.json';
const dc = (extra: object) => parseDevcontainer(JSON.stringify({ image: 'drydock-sandbox-base', ...extra }), SOURCE);

test('-e NAME=value and --env-file of the repo are honoured; what drydock does already is harmless', () => {
  const settings = runSettingsOf(
    [
      '--init',
      '--rm',
      '-it',
      '--name',
      'my-dev',
      '--hostname=dev',
      '--shm-size',
      '2g',
      '--security-opt',
      'no-new-privileges',
      '--cap-drop=ALL',
      '-e',
      'MODE=test',
      '--env=EMPTY=',
      '--env-file',
      '${localWorkspaceFolder}/.devcontainer/dev.env',
      '--env-file=config/app.env',
    ],
    [],
    SOURCE,
  );
  expect(settings).toEqual({
    env: { MODE: 'test', EMPTY: '' },
    envFiles: ['.devcontainer/dev.env', 'config/app.env'],
    volumes: [],
    links: [],
    problems: [],
  });
});

test.each([
  [['--cap-add=SYS_PTRACE'], /runArgs\.0: "--cap-add=SYS_PTRACE": sandboxes run with no capabilities \(a debugger/],
  // The debugger's note is SYS_PTRACE's alone.
  [['--cap-add=NET_ADMIN'], /runArgs\.0: "--cap-add=NET_ADMIN": sandboxes run with no capabilities: remove it$/],
  [
    ['--security-opt', 'seccomp=unconfined'],
    /runArgs\.0: "--security-opt seccomp=unconfined": sandboxes run under drydock's seccomp profile/,
  ],
  [['--privileged'], /runArgs\.0: "--privileged": sandboxes run without privileges/],
  [['--net=host'], /runArgs\.0: "--net=host": a sandbox has no IP network/],
  [['-p', '3000:3000'], /runArgs\.0: "-p 3000:3000": nothing of a sandbox is published on the host/],
  [
    ['-v', '/etc/localtime:/etc/localtime:ro'],
    /runArgs\.0: "-v \/etc\/localtime:\/etc\/localtime:ro": a sandbox mounts nothing/,
  ],
  [['--gpus', 'all'], /runArgs\.0: "--gpus all": a sandbox gets no host devices/],
  [['--add-host', 'host.docker.internal:host-gateway'], /runArgs\.0: .*a sandbox reaches nothing but its own loopback/],
  [['--userns=keep-id'], /runArgs\.0: "--userns=keep-id": a sandbox always runs as the sandbox user/],
  [['-e', 'DISPLAY'], /runArgs\.0: "-e DISPLAY": takes its value from the developer's machine/],
  [['--env-file', '/home/me/.env'], /runArgs\.0: "--env-file \/home\/me\/\.env": only a file of the repository/],
  [['--frobnicate'], /runArgs\.0: "--frobnicate": not supported by drydock/],
])('runArgs %j is refused, naming the entry', (runArgs, message) => {
  const { problems } = runSettingsOf(runArgs, [], SOURCE);
  expect(problems).toEqual([expect.stringMatching(message)]);
});

test.each([
  [
    'source=${localEnv:HOME}/.ssh,target=/home/node/.ssh,type=bind',
    /a folder of the developer's machine, which a sandbox never mounts/,
  ],
  [
    'source=/var/run/docker.sock,target=/var/run/docker.sock,type=bind',
    /the Docker socket is never given to a sandbox/,
  ],
  [
    { source: '${localWorkspaceFolder}/x', target: '/workspace/y', type: 'bind' },
    /a folder of the repository, which a sandbox has at \/workspace/,
  ],
  ['source=etc,target=/etc,type=volume', /mounts\.0: "source=etc,target=\/etc,type=volume": \/etc is a system folder/],
  [{ source: 'x', target: 'relative', type: 'volume' }, /needs an absolute target path/],
])('mounts %j is refused, naming the entry and why', (mount, message) => {
  expect(runSettingsOf([], [mount], SOURCE).problems).toEqual([expect.stringMatching(message)]);
});

test('a folder of the repo mounted elsewhere is a link to its place in /workspace; the repo where it is, nothing', () => {
  const mounts = [
    { source: '${localWorkspaceFolder}', target: '/code', type: 'bind' },
    'source=${localWorkspaceFolder}/.devcontainer/state,target=/home/vscode/.claude,type=bind,consistency=cached',
    'source=${localWorkspaceFolder},target=/workspaces/app,type=bind',
  ];
  expect(runSettingsOf([], mounts, SOURCE)).toMatchObject({
    problems: [],
    links: [
      { path: '/code', to: '/workspace' },
      { path: '/home/vscode/.claude', to: '/workspace/.devcontainer/state' },
    ],
  });
  expect(dc({ mounts }).links).toHaveLength(2);
});

test('${containerWorkspaceFolder} in a target is /workspace, where the sandbox has the repo', () => {
  const mounts = [
    'source=${localWorkspaceFolderBasename}-node_modules,target=${containerWorkspaceFolder}/node_modules,type=volume',
    'source=${localWorkspaceFolder},target=${containerWorkspaceFolder},type=bind,consistency=cached',
  ];
  expect(runSettingsOf([], mounts, SOURCE)).toMatchObject({
    problems: [],
    volumes: ['/workspace/node_modules'],
    links: [],
  });
});

test("named volumes are folders of the sandbox: the workspace's and home's kept in the snapshot, others VOLUMEs of drydock's layer", () => {
  const mounts = [
    'source=venv-${devcontainerId},target=/workspace/.venv,type=volume',
    'source=history,target=/commandhistory,type=volume',
    { source: 'pip', target: '/home/vscode/.cache/pip/', type: 'volume' },
    'source=x,dst=/home/drydock/.cache,type=volume',
    'type=volume,source=tmp,target=/tmp/x',
  ];
  expect(runSettingsOf([], mounts, SOURCE)).toMatchObject({
    problems: [],
    volumes: ['/workspace/.venv', '/commandhistory', '/home/vscode/.cache/pip/', '/home/drydock/.cache', '/tmp/x'],
  });
  const env = dc({ mounts });
  expect(env.volumes).toEqual(['/commandhistory', '/home/vscode/.cache/pip']);
  expect(hostLayer(env, [])).toMatchObject({ volumes: ['/commandhistory', '/home/vscode/.cache/pip'] });
  expect(dc({ mounts: [mounts[0]] }).volumes).toBeUndefined();
});

test("properties of an editor or of the developer's machine are harmless; privileges refused; an unknown one named", () => {
  const harmless = {
    name: 'x',
    customizations: {},
    workspaceFolder: '/workspaces/x',
    postAttachCommand: 'x',
    initializeCommand: 'x',
    containerUser: 'root',
    shutdownAction: 'none',
    hostRequirements: { cpus: 2 },
  };
  expect(propertyProblems(harmless, SOURCE)).toEqual([]);
  expect(propertyProblems({ capAdd: ['SYS_PTRACE'], privileged: true, remoteEnvs: {} }, SOURCE)).toEqual([
    `${SOURCE}: capAdd: sandboxes run with no capabilities (a debugger traces the sandbox's own processes without SYS_PTRACE): remove it`,
    `${SOURCE}: privileged: sandboxes run without privileges: remove it`,
    `${SOURCE}: remoteEnvs: not a dev container property drydock knows: remove it, or check its spelling`,
  ]);
  expect(() => dc({ capAdd: ['SYS_PTRACE'], runArgs: ['--privileged'] })).toThrow(
    /capAdd: sandboxes run with no capabilities.*; .*runArgs\.0: "--privileged"/,
  );
});

test("runArgs' environment is the sandbox's: -e, then --env-file from the repo, containerEnv winning", async () => {
  const env = dc({
    runArgs: ['-e', 'A=from-e', '--env-file', '.devcontainer/dev.env'],
    containerEnv: { C: 'from-containerEnv' },
  });
  const files: Record<string, string> = { '.devcontainer/dev.env': 'B=from-file\nC=from-file\n' };
  const { environment } = await declaredStack((f) => Promise.resolve(files[f]), env, undefined);
  expect(environment?.containerEnv).toEqual({ A: 'from-e', B: 'from-file', C: 'from-containerEnv' });
  await expect(declaredStack(() => Promise.resolve(undefined), env, undefined)).rejects.toThrow(
    `${SOURCE}: runArgs: --env-file .devcontainer/dev.env is not in the repository`,
  );
});
