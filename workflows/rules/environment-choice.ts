/**
 * Which environment a repo's sandboxes run in: its dev container, its
 * Dockerfile, drydock's base image or a named image. The operator decides
 * first (`drydock repo add --environment`, `--ignore-devcontainer`, kept in
 * the registry), then the repo's `.drydock/config.yaml` (`environment`), then
 * the repo's own `.devcontainer/devcontainer.json`; none of them: the base
 * image. A session input cannot choose: its sandbox starts from the repo's
 * snapshot, built in this environment. Pure: the caller says which files exist.
 */
import { parseImageReference } from './images';

/** The dev container a repo has when its config file names none. */
export const DEFAULT_DEVCONTAINER = '.devcontainer/devcontainer.json';
/** The Dockerfile `--environment dockerfile` builds when the config file names none. */
export const DEFAULT_DOCKERFILE = 'Dockerfile';

/** The operator's choice (`repo add --environment`). */
export type EnvironmentSetting = 'devcontainer' | 'dockerfile' | 'base' | `image:${string}`;

/** What the registry keeps of the operator's choice. */
export interface OperatorEnvironment {
  environment?: EnvironmentSetting;
  /** `--ignore-devcontainer`: the repo's dev container is never read (its config file's Dockerfile still counts). */
  ignoreDevcontainer?: boolean;
}

/** The repo file's `environment` block (workflows/repo-config.ts). */
export interface RepoFileEnvironment {
  devcontainer?: string;
  dockerfile?: string;
  context?: string;
}

export type EnvironmentChoice =
  | { kind: 'devcontainer'; file: string; by: string }
  | { kind: 'dockerfile'; file: string; context?: string; by: string }
  | { kind: 'image'; image: string; by: string }
  | { kind: 'base'; by: string };

const SETTINGS = 'devcontainer, dockerfile, base or image:<ref>';

/** `--environment`'s value, or why not (naming the flag). */
export function parseEnvironmentSetting(
  value: string,
): { ok: true; setting: EnvironmentSetting } | { ok: false; problem: string } {
  if (value === 'devcontainer' || value === 'dockerfile' || value === 'base') return { ok: true, setting: value };
  if (value.startsWith('image:')) {
    const ref = parseImageReference(value.slice('image:'.length));
    if ('problem' in ref) return { ok: false, problem: `--environment ${value}: ${ref.problem}` };
    return { ok: true, setting: value as EnvironmentSetting };
  }
  return { ok: false, problem: `--environment: expected ${SETTINGS}, got "${value}"` };
}

/** A choice the flags cannot both make, or undefined. */
export function conflictingFlags(operator: OperatorEnvironment): string | undefined {
  if (operator.ignoreDevcontainer && operator.environment === 'devcontainer') {
    return '--ignore-devcontainer and --environment devcontainer contradict each other: give one';
  }
  return undefined;
}

/** The files whose presence decides the choice: the caller looks them up at the commit. */
export function environmentFiles(repoFile: RepoFileEnvironment | undefined): string[] {
  return [repoFile?.devcontainer ?? DEFAULT_DEVCONTAINER, repoFile?.dockerfile ?? DEFAULT_DOCKERFILE];
}

/**
 * The environment, by precedence: the operator's setting, then the repo
 * file's, then the repo's dev container, else the base image. A refusal
 * names the setting that asked for a file the repo lacks and what to do.
 */
export function chooseEnvironment(
  operator: OperatorEnvironment | undefined,
  repoFile: RepoFileEnvironment | undefined,
  present: ReadonlySet<string>,
): { ok: true; choice: EnvironmentChoice } | { ok: false; refusal: string } {
  const setting = operator?.environment;
  const flag = `the operator's setting (repo add --environment ${setting})`;
  const devcontainer = repoFile?.devcontainer ?? DEFAULT_DEVCONTAINER;
  const dockerfile = repoFile?.dockerfile ?? DEFAULT_DOCKERFILE;
  const context = repoFile?.dockerfile && repoFile.context ? { context: repoFile.context } : {};
  const missing = (file: string) => ({
    ok: false as const,
    refusal: `${flag}: ${file} is not in the repository; register the repo again with another --environment (${SETTINGS})`,
  });
  if (setting === 'base') return { ok: true, choice: { kind: 'base', by: flag } };
  if (setting?.startsWith('image:')) return { ok: true, choice: { kind: 'image', image: setting.slice(6), by: flag } };
  if (setting === 'devcontainer') {
    if (!present.has(devcontainer)) return missing(devcontainer);
    return { ok: true, choice: { kind: 'devcontainer', file: devcontainer, by: flag } };
  }
  if (setting === 'dockerfile') {
    if (!present.has(dockerfile)) return missing(dockerfile);
    return { ok: true, choice: { kind: 'dockerfile', file: dockerfile, ...context, by: flag } };
  }
  return repoChoice(operator, repoFile, present);
}

/** Without the operator's setting: the repo file's choice, then the repo's dev container (unless ignored), else base. */
function repoChoice(
  operator: OperatorEnvironment | undefined,
  repoFile: RepoFileEnvironment | undefined,
  present: ReadonlySet<string>,
): { ok: true; choice: EnvironmentChoice } | { ok: false; refusal: string } {
  const ignored = "the operator's setting (repo add --ignore-devcontainer)";
  if (repoFile?.dockerfile) {
    const context = repoFile.context ? { context: repoFile.context } : {};
    return {
      ok: true,
      choice: { kind: 'dockerfile', file: repoFile.dockerfile, ...context, by: '.drydock/config.yaml' },
    };
  }
  if (repoFile?.devcontainer) {
    if (operator?.ignoreDevcontainer) return { ok: true, choice: { kind: 'base', by: ignored } };
    if (!present.has(repoFile.devcontainer)) {
      return {
        ok: false,
        refusal: `${repoFile.devcontainer}: not in the repository (named in .drydock/config.yaml environment.devcontainer)`,
      };
    }
    return { ok: true, choice: { kind: 'devcontainer', file: repoFile.devcontainer, by: '.drydock/config.yaml' } };
  }
  if (present.has(DEFAULT_DEVCONTAINER)) {
    if (operator?.ignoreDevcontainer) return { ok: true, choice: { kind: 'base', by: ignored } };
    return { ok: true, choice: { kind: 'devcontainer', file: DEFAULT_DEVCONTAINER, by: 'the repo' } };
  }
  return { ok: true, choice: { kind: 'base', by: 'the repo (it declares no environment)' } };
}
