/**
 * How devcontainer.json says to run the dev container on a developer's
 * machine (`runArgs`, `mounts`, and its other properties), read against what
 * a sandbox is: every entry honoured (an environment variable, an env file of
 * the repo), harmless (what drydock does already, or what means nothing
 * without an editor: `--init`, `--rm`, `--name`, `customizations`…), or a
 * problem naming the field and what to do. Never dropped in silence.
 * Pure: sandbox/repo-image.ts reads the file and throws the problems.
 */

import path from 'node:path';

type Obj = Record<string, unknown>;

/** What a dev container's run settings give the sandbox, and what cannot be honoured. */
export interface RunSettings {
  /** `-e NAME=value` entries: the sandbox's environment, under containerEnv. */
  env: Record<string, string>;
  /** `--env-file` entries, paths of the repo, read in order (sandbox/activities/services.ts). */
  envFiles: string[];
  /** Targets of `mounts` of named volumes: folders of the sandbox (sandboxVolumes). */
  volumes: string[];
  /** `mounts` of folders of the repo (`${localWorkspaceFolder}/…`) elsewhere: links to their place in /workspace. */
  links: RepoLink[];
  problems: string[];
}

/**
 * Where a sandbox's folders may not be a volume (which starts empty): the
 * runtime's, and the system's, whose content the image cannot run without.
 */
const SYSTEM_FOLDERS = /^\/(?:proc|sys|dev|run)(?:\/|$)|^\/(?:bin|boot|etc|lib\w*|sbin|usr|var|opt)?$/;

/**
 * Why a named volume's target cannot be a folder of a sandbox (a system
 * folder, the runtime's, or not an absolute path), else undefined.
 */
export function volumeTargetProblem(target: string): string | undefined {
  if (!target.startsWith('/') || target.split('/').includes('..') || /[\0,]/.test(target))
    return 'a named volume needs an absolute target path without ".."';
  const normal = path.posix.normalize(target).replace(/(.)\/+$/, '$1');
  if (SYSTEM_FOLDERS.test(normal))
    return `${normal} is a system folder of the sandbox's image: mount the volume on a folder of its own`;
  return undefined;
}

/** A folder of the repo the dev container has at another path: a link there to its place in /workspace. */
export interface RepoLink {
  /** Where the dev container mounts it (absolute). */
  path: string;
  /** Where the sandbox has it: /workspace/<repo path>. */
  to: string;
}

/**
 * Why a folder or file of the repo cannot be linked at `target` (where the
 * dev container mounts it): a system or runtime folder, inside /workspace,
 * the home folder or /tmp (the sandbox's own), or a path a shell would have
 * to quote; else undefined.
 */
export function linkTargetProblem(target: string, own: string[]): string | undefined {
  const base = volumeTargetProblem(target);
  if (base) return base;
  const normal = path.posix.normalize(target).replace(/(.)\/+$/, '$1');
  if (!/^[A-Za-z0-9_./@+-]+$/.test(normal)) return `${normal}: a path of letters, digits and _ . / @ + -`;
  if ([...own, '/tmp'].some((f) => normal === f || normal.startsWith(`${f}/`) || f.startsWith(`${normal}/`)))
    return `${normal} is in (or holds) the sandbox's own ${own.join(' or ')} or /tmp: read the repository at /workspace`;
  return undefined;
}

/**
 * The folders a sandbox gets for its named volumes: those at or below
 * /workspace, the home folder or /tmp are the sandbox's already (the first
 * two kept in its snapshot); any other becomes a VOLUME of the environment
 * image, which every sandbox has as a writable folder of its own (an empty
 * tmpfs, as for any image VOLUME: sandbox/docker/create-options.ts).
 */
export function sandboxVolumes(targets: string[], own: string[]): string[] {
  const inside = (t: string, folder: string) => t === folder || t.startsWith(`${folder}/`);
  const normal = targets.map((t) => path.posix.normalize(t).replace(/(.)\/+$/, '$1'));
  return [...new Set(normal)].filter((t) => ![...own, '/tmp'].some((folder) => inside(t, folder)));
}

/**
 * devcontainer.json properties drydock reads elsewhere (the schema in
 * sandbox/repo-image.ts), and those that mean nothing in a sandbox: an
 * editor's (customizations, portsAttributes, postAttachCommand…), the
 * developer's machine's (initializeCommand runs there, workspaceMount and
 * workspaceFolder place the repo, which a sandbox has at /workspace), or
 * what drydock decides itself (containerUser, updateRemoteUserUID: the
 * sandbox runs as uid 1000; hostRequirements: the operator's limits;
 * overrideCommand, shutdownAction, init: drydock's keeper).
 */
const KNOWN = new Set([
  // Read by sandbox/repo-image.ts.
  'image',
  'dockerFile',
  'context',
  'build',
  'containerEnv',
  'remoteUser',
  'features',
  'overrideFeatureInstallOrder',
  'onCreateCommand',
  'updateContentCommand',
  'postCreateCommand',
  'dockerComposeFile',
  'service',
  'runServices',
  'forwardPorts',
  'postStartCommand',
  'remoteEnv',
  'mounts',
  'runArgs',
  // Nothing to do in a sandbox.
  '$schema',
  'name',
  'customizations',
  'extensions',
  'settings',
  'portsAttributes',
  'otherPortsAttributes',
  'appPort',
  'postAttachCommand',
  'waitFor',
  'initializeCommand',
  'workspaceFolder',
  'workspaceMount',
  'containerUser',
  'updateRemoteUserUID',
  'userEnvProbe',
  'hostRequirements',
  'overrideCommand',
  'shutdownAction',
  'init',
  'secrets',
]);

/** devcontainer.json properties drydock refuses, and what to do. */
const REFUSED: Record<string, string> = {
  privileged: 'sandboxes run without privileges: remove it',
  capAdd:
    "sandboxes run with no capabilities (a debugger traces the sandbox's own processes without SYS_PTRACE): remove it",
  securityOpt: "sandboxes run under drydock's seccomp profile with no new privileges: remove it",
};

/** Problems with devcontainer.json's top-level properties: each one not known is named. */
export function propertyProblems(data: Obj, source: string): string[] {
  return Object.keys(data)
    .filter((key) => !KNOWN.has(key))
    .map(
      (key) =>
        `${source}: ${key}: ${REFUSED[key] ?? 'not a dev container property drydock knows: remove it, or check its spelling'}`,
    );
}

/** runArgs that take a value (`--name x` or `--name=x`). */
const TAKES_VALUE = new Set(
  (
    '--name -h --hostname --shm-size -l --label --restart -e --env --env-file --cap-add --cap-drop --security-opt ' +
    '--network --net -p --publish -v --volume --mount --device --gpus --add-host --userns -u --user --ulimit ' +
    '-m --memory --cpus --pids-limit --ipc --pid --uts --dns --entrypoint -w --workdir --runtime --platform ' +
    '--tmpfs --sysctl --group-add --log-driver --log-opt --cgroupns --cgroup-parent --volumes-from --link'
  ).split(' '),
);

/** runArgs that change nothing of a sandbox: drydock does it already, or it names only the developer's container. */
const HARMLESS = new Set(
  '--init --rm -i -t -it -ti -d --interactive --tty --detach --name -h --hostname --shm-size -l --label --restart --cap-drop'.split(
    ' ',
  ),
);

/** runArgs drydock refuses, and why. */
const REFUSED_ARGS: Record<string, string> = {
  '--cap-add': REFUSED.capAdd,
  '--security-opt': REFUSED.securityOpt,
  '--privileged': REFUSED.privileged,
  '--network':
    "a sandbox has no IP network: what it reaches goes through drydock's egress proxy (drydock repo add --allow)",
  '--net':
    "a sandbox has no IP network: what it reaches goes through drydock's egress proxy (drydock repo add --allow)",
  '-p': "nothing of a sandbox is published on the host: remove it (the app's port goes in forwardPorts)",
  '--publish': "nothing of a sandbox is published on the host: remove it (the app's port goes in forwardPorts)",
  '-v': 'a sandbox mounts nothing of the host: remove it (the repository is at /workspace)',
  '--volume': 'a sandbox mounts nothing of the host: remove it (the repository is at /workspace)',
  '--mount': 'a sandbox mounts nothing of the host: remove it (the repository is at /workspace)',
  '--device': 'a sandbox gets no host devices: remove it',
  '--gpus': 'a sandbox gets no host devices: remove it',
  '--add-host': "a sandbox reaches nothing but its own loopback and drydock's egress proxy: remove it",
  '--userns': 'a sandbox always runs as the sandbox user (uid 1000): remove it',
  '-u': 'a sandbox always runs as the sandbox user (uid 1000): remove it',
  '--user': 'a sandbox always runs as the sandbox user (uid 1000): remove it',
};

/** The repo path an `--env-file` names (`${localWorkspaceFolder}/x` or relative to the repo's root), if it is one. */
function repoFileOf(value: string): string | undefined {
  const relative = value.replace(/^\$\{localWorkspaceFolder\}\/?/, '');
  const parts = relative.split('/').filter((p) => p && p !== '.');
  if (relative.startsWith('/') || relative.includes('${') || parts.includes('..') || !parts.length) return undefined;
  return parts.join('/');
}

/** runArgs as `docker run` reads them: each flag with its value, and where it is (runArgs.<index>). */
function flagsOf(args: string[]): { flag: string; value?: string; at: number; text: string }[] {
  const out: { flag: string; value?: string; at: number; text: string }[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    if (eq > 0) out.push({ flag: arg.slice(0, eq), value: arg.slice(eq + 1), at: i, text: arg });
    else if (TAKES_VALUE.has(arg) && i + 1 < args.length) {
      out.push({ flag: arg, value: args[i + 1], at: i, text: `${arg} ${args[i + 1]}` });
      i++;
    } else out.push({ flag: arg, at: i, text: arg });
  }
  return out;
}

/** What the dev container's runArgs and mounts give the sandbox, or what they ask that it cannot have. */
export function runSettingsOf(
  runArgs: string[] | undefined,
  mounts: unknown[] | undefined,
  source: string,
): RunSettings {
  const settings: RunSettings = { env: {}, envFiles: [], volumes: [], links: [], problems: [] };
  const problem = (field: string, text: string, why: string) =>
    settings.problems.push(`${source}: ${field}: "${text}": ${why}`);
  for (const { flag, value, at, text } of flagsOf(runArgs ?? [])) {
    const field = `runArgs.${at}`;
    if (HARMLESS.has(flag)) continue;
    if (flag === '--security-opt' && value === 'no-new-privileges') continue; // drydock's own setting
    if (flag === '-e' || flag === '--env') {
      const m = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(value ?? '');
      if (m) settings.env[m[1]] = m[2];
      else
        problem(
          field,
          text,
          "takes its value from the developer's machine, which a sandbox does not have: write NAME=value",
        );
    } else if (flag === '--env-file') {
      const file = repoFileOf(value ?? '');
      if (file) settings.envFiles.push(file);
      else
        problem(
          field,
          text,
          'only a file of the repository (relative to its root, or ${localWorkspaceFolder}/…) is read',
        );
    } else
      problem(
        field,
        text,
        flag === '--cap-add' && !/SYS_PTRACE/i.test(value ?? '')
          ? 'sandboxes run with no capabilities: remove it'
          : (REFUSED_ARGS[flag] ?? REFUSED[flag.replace(/^--/, '')] ?? 'not supported by drydock: remove it'),
      );
  }
  for (const [i, mount] of (mounts ?? []).entries()) {
    const text = typeof mount === 'string' ? mount : JSON.stringify(mount);
    const fields = mountFields(mount);
    if (fields.type === 'volume') {
      const target = String(fields.target ?? fields.dst ?? fields.destination ?? '');
      const why = volumeTargetProblem(target);
      if (why) problem(`mounts.${i}`, text, why);
      else settings.volumes.push(target);
    } else if (repoLinkOf(fields, settings.links) === undefined) problem(`mounts.${i}`, text, mountRefusal(fields));
  }
  return settings;
}

/**
 * A bind `mounts` entry of a folder of the repo (`${localWorkspaceFolder}` or
 * below) at a path a link can be: the link, added to `links`; else undefined.
 */
function repoLinkOf(fields: Obj, links: RepoLink[]): RepoLink | undefined {
  const source = String(fields.source ?? fields.src ?? '');
  const target = String(fields.target ?? fields.dst ?? fields.destination ?? '');
  if (fields.type !== 'bind' || !/^\$\{localWorkspaceFolder\}(?:\/|$)/.test(source)) return undefined;
  const relative = source.replace(/^\$\{localWorkspaceFolder\}\/?/, '');
  const parts = relative.split('/').filter((p) => p && p !== '.');
  if (parts.includes('..') || !/^[A-Za-z0-9_./@+-]*$/.test(relative)) return undefined;
  if (!parts.length && /^\/workspaces?(?:\/|$)/.test(target)) return { path: target, to: '/workspace' }; // where it is
  const link = {
    path: path.posix.normalize(target).replace(/(.)\/+$/, '$1'),
    to: parts.length ? `/workspace/${parts.join('/')}` : '/workspace',
  };
  if (link.path === link.to) return link; // where it is (a target of ${localWorkspaceFolder}/…: /workspace/…)
  if (linkTargetProblem(target, ['/workspace', '/home/drydock'])) return undefined;
  links.push(link);
  return link;
}

/**
 * A mount's fields, from `"source=x,target=/y,type=volume"` or an object; a
 * target's `${containerWorkspaceFolder}` is where the sandbox has the repo
 * (/workspace), as the spec's variable means, and so is its
 * `${localWorkspaceFolder}` (the repo's folder, which in a sandbox is
 * /workspace: a mount of the repo at its own path is where it is).
 */
function mountFields(mount: unknown): Obj {
  const fields: Obj =
    typeof mount === 'string'
      ? Object.fromEntries(mount.split(',').map((kv) => [kv.split('=')[0].trim(), kv.split('=').slice(1).join('=')]))
      : typeof mount === 'object' && mount !== null
        ? { ...(mount as Obj) }
        : {};
  for (const key of ['target', 'dst', 'destination'])
    if (typeof fields[key] === 'string')
      fields[key] = (fields[key] as string).replace(/\$\{(?:container|local)WorkspaceFolder\}/g, '/workspace');
  return fields;
}

/** Why a dev container's bind mount cannot be a sandbox's, and what to do. */
function mountRefusal(fields: Obj): string {
  const sourceOf = String(fields.source ?? fields.src ?? '');
  if (sourceOf.includes('docker.sock')) return 'the Docker socket is never given to a sandbox: remove it';
  if (sourceOf.startsWith('${localWorkspaceFolder}'))
    return 'a folder of the repository, which a sandbox has at /workspace: read it from there, or remove it';
  return "a folder of the developer's machine, which a sandbox never mounts (credentials stay with the worker): remove it";
}

/**
 * The dev container's user (remoteUser, a compose dev service's `user`) as a sandbox takes it: a sandbox
 * always runs as the sandbox user (uid 1000), so root is not given, said in
 * `notes` (sessions never run as root: what needs root goes in the image's
 * Dockerfile, a feature or setup.root, all run as root in the isolated
 * builder), and features are told the sandbox's user, not root; undefined
 * then. Any other name is kept for the features (its form checked by the schema).
 */
export function sandboxUser(user: string | undefined, field: string, notes: string[]): string | undefined {
  if (user === undefined || !/^(?:root|0)(?::|$)/.test(user)) return user;
  notes.push(
    `${field}: root is not given: a sandbox runs as the sandbox user (uid 1000), and so do the lifecycle commands; ` +
      'what needs root goes in the Dockerfile, a feature or setup.root (run as root in the isolated builder)',
  );
  return undefined;
}
