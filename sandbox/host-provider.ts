/**
 * Which sandbox provider this host uses (DRYDOCK_SANDBOX_PROVIDER): the
 * registry of providers, the one place outside their folders that names
 * them. Each registers its settings schema, how it is made from them, and
 * the checks the worker runs at start (sandbox/docker/settings.ts,
 * sandbox/kubernetes/start.ts); a further provider is a folder and one line
 * in PROVIDERS (and its name in DRYDOCK_SANDBOX_PROVIDER's list).
 */
import type { z } from 'zod';
import type { Config } from '../platform/config';
import { checkDocker, createDockerProvider, dockerSettingsSchema } from './docker/settings';
import { kubernetesSettingsSchema } from './kubernetes/settings';
import { ProviderCheckFailed, type SandboxProvider } from './provider';

/** What the worker asks of every provider at start besides its own settings. */
export interface StartNeeds {
  /** The image sandboxes start from, and the variable that names it (for the message when it is missing). */
  baseImage: string;
  baseImageSetting: string;
}

/** A provider made from parsed settings, with the checks of its settings and engine. */
interface Opened {
  provider: SandboxProvider;
  check(need: StartNeeds): Promise<void>;
}

interface RegisteredProvider {
  /** Parses the provider's settings from `source` (a bad one: ProviderCheckFailed) and makes it; no call to its engine yet. */
  open(source: Record<string, unknown>): Opened;
}

/** One provider's entry: its settings schema, how it is made, and what it checks at start. */
function registered<S extends z.ZodType, P extends SandboxProvider>(
  schema: S,
  create: (settings: z.output<S>) => P,
  check: (provider: P, settings: z.output<S>, need: StartNeeds) => Promise<void>,
): RegisteredProvider {
  return {
    open(source) {
      const parsed = schema.safeParse(source);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        throw new ProviderCheckFailed(issue.path.join('.'), issue.message);
      }
      const provider = create(parsed.data);
      return { provider, check: (need) => check(provider, parsed.data, need) };
    },
  };
}

/**
 * Loaded when Kubernetes is the provider, not at the top: the client takes
 * over a second to load, which Docker workers need not pay. require, not
 * import(): drydock runs its sources through tsx's CommonJS hook, which
 * import() bypasses.
 */
// eslint-disable-next-line @typescript-eslint/no-require-imports
const kubernetes = () => require('./kubernetes/start') as typeof import('./kubernetes/start');

/** name → settings schema, create, check. */
const PROVIDERS: Record<Config['DRYDOCK_SANDBOX_PROVIDER'], RegisteredProvider> = {
  docker: registered(dockerSettingsSchema, createDockerProvider, checkDocker),
  kubernetes: registered(
    kubernetesSettingsSchema,
    (settings) => kubernetes().createKubernetesProvider(settings),
    (provider, settings) => kubernetes().checkKubernetes(provider, settings),
  ),
};

/** The settings a provider reads: the parsed configuration over the raw environment (DOCKER_HOST, KUBECONFIG). */
function settingsSource(config: Partial<Config>, env: NodeJS.ProcessEnv): Record<string, unknown> {
  return { ...env, ...config };
}

/**
 * This host's provider, unchecked (the CLI's attach and the server, which
 * only reach sandboxes a worker made). docker: the engine DOCKER_HOST names
 * (default: the local socket), its sandboxes' storage under `<data
 * dir>/sandboxes`. kubernetes: pods on this worker's node, snapshots under
 * `<data dir>/snapshots` on that node.
 */
export async function hostProvider(config: Config, env: NodeJS.ProcessEnv = process.env): Promise<SandboxProvider> {
  return PROVIDERS[config.DRYDOCK_SANDBOX_PROVIDER].open(settingsSource(config, env)).provider;
}

/**
 * This host's provider once its settings and engine are checked: what the
 * worker starts with. Throws ProviderCheckFailed, one line naming the
 * setting and what to do, before the worker takes any work.
 */
export async function startHostProvider(
  config: Config,
  need: StartNeeds,
  env: NodeJS.ProcessEnv = process.env,
): Promise<SandboxProvider> {
  const opened = PROVIDERS[config.DRYDOCK_SANDBOX_PROVIDER].open(settingsSource(config, env));
  await opened.check(need);
  return opened.provider;
}

/** The runtime sandboxes ask for: a Docker runtime, or a Kubernetes RuntimeClass. */
export function sandboxRuntimeOf(
  config: Pick<Config, 'DRYDOCK_SANDBOX_PROVIDER' | 'DRYDOCK_DOCKER_RUNTIME' | 'DRYDOCK_K8S_RUNTIME_CLASS'>,
): string | undefined {
  return config.DRYDOCK_SANDBOX_PROVIDER === 'docker'
    ? config.DRYDOCK_DOCKER_RUNTIME
    : config.DRYDOCK_K8S_RUNTIME_CLASS;
}
