/**
 * A repo's services and app (docs/services.md): the `services:` and `app:`
 * blocks of .drydock/config.yaml, validated here with zod (their JSON Schema
 * is part of workflows/repo-config.schema.json), and the one shape both they
 * and a dev container's compose file (sandbox/compose.ts) become: `ServiceSpec`.
 * Each service is a container of its own in the sandbox's network namespace:
 * it reaches the sandbox and the other services on localhost, nothing else.
 */
import { z } from 'zod';
import { durationUpTo, sizeBetween } from './input';
import { durationMs, sizeBytes } from './units';
import { parseImageReference } from './rules/images';

/** At most this many services per repo: each is a container per session. */
export const MAX_SERVICES = 8;

/** A service's name: what `services.<name>` and the logs call it. */
export const serviceName = z
  .string()
  .regex(/^[a-z0-9][a-z0-9_-]{0,30}$/, 'lowercase letters, digits, "_" and "-", at most 31 characters');

export const imageRef = z
  .string()
  .min(1)
  .superRefine((ref, ctx) => {
    const parsed = parseImageReference(ref);
    if ('problem' in parsed) ctx.addIssue({ code: 'custom', message: parsed.problem });
  });

const envName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name');
const absolutePath = z
  .string()
  .regex(/^\/[^\0]*$/, 'an absolute path in the service container')
  .refine((p) => !p.split('/').includes('..') && p !== '/', 'a folder below /, without ".."');
const argv = z.array(z.string().max(4096)).min(1).max(256);
const port = z.number().int().min(1).max(65535);

export const healthcheck = z.strictObject({
  test: z
    .union([z.string().min(1), argv])
    .describe('A shell command, or ["CMD", argv…] / ["CMD-SHELL", command] / ["NONE"] as Docker writes them'),
  interval: durationUpTo('5m').default('1s').describe('Between checks; at most 5m'),
  timeout: durationUpTo('5m').default('10s').describe('Of one check; at most 5m'),
  retries: z.number().int().min(1).max(1000).default(60).describe('Failed checks in a row before it is unhealthy'),
  startPeriod: durationUpTo('10m').default(0).describe('Failures during it do not count; at most 10m'),
});

export const serviceLimits = z.strictObject({
  cpus: z.number().positive().max(16).optional().describe("CPUs of this service; at most the session's"),
  memory: sizeBetween('16m', '64g')
    .optional()
    .describe("Memory of this service, taken from the session's memory (default 256m)"),
  pids: z.number().int().min(16).max(4096).optional().describe("Processes of this service, taken from the session's"),
});

export const serviceDeclaration = z.strictObject({
  image: imageRef.describe("An image on the worker's host, or from a registry the operator allows"),
  environment: z.record(envName, z.union([z.string(), z.number(), z.boolean()]).transform(String)).optional(),
  command: argv.optional().describe("Arguments that replace the image's CMD"),
  entrypoint: argv.optional().describe("Replaces the image's ENTRYPOINT"),
  user: z
    .string()
    .regex(
      /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$/,
      'a user[:group], by name or number',
    )
    .refine((u) => !/^(root|0)(:|$)/.test(u), 'services never run as root')
    .optional()
    .describe("Run as this user (default: the image's)"),
  workingDir: absolutePath.optional(),
  healthcheck: healthcheck.optional().describe("When it is ready; default: the image's HEALTHCHECK, else its ports"),
  ports: z.array(port).max(16).optional().describe('Ports it listens on (localhost): ready once they accept'),
  data: z
    .array(absolutePath)
    .max(8)
    .optional()
    .describe("Folders whose content setup's data lives in: captured with the snapshot, each session gets a copy"),
  dependsOn: z.array(serviceName).optional().describe('Services started (and healthy) before this one'),
  limits: serviceLimits.optional(),
});
export type ServiceDeclaration = z.infer<typeof serviceDeclaration>;

export const servicesBlock = z.record(z.string(), serviceDeclaration).superRefine((services, ctx) => {
  const names = Object.keys(services);
  if (names.length > MAX_SERVICES) ctx.addIssue({ code: 'custom', message: `at most ${MAX_SERVICES} services` });
  for (const name of names) {
    const bad = serviceName.safeParse(name);
    if (!bad.success)
      ctx.addIssue({ code: 'custom', path: [name], message: `a service's name: ${bad.error.issues[0].message}` });
  }
});

export const appBlock = z.strictObject({
  start: z.string().min(1).describe('Shell command that starts the app in /workspace, e.g. "npm run dev"'),
  port: port.describe('The port it answers on (localhost)'),
  ready: z
    .strictObject({
      path: z.string().startsWith('/').default('/').describe('An HTTP path that answers once the app is up'),
      timeout: durationUpTo('10m').default('60s'),
    })
    .prefault({}),
  forAgent: z
    .boolean()
    .default(false)
    .describe('Start the app for the agent too, before its first step, and keep it running across steps'),
});
export type AppDeclaration = z.infer<typeof appBlock>;

/** A service as the sandbox runs it, from either declaration. */
export interface ServiceSpec {
  name: string;
  image: string;
  environment: Record<string, string>;
  command?: string[];
  entrypoint?: string[];
  user?: string;
  workingDir?: string;
  /** argv run in the service container until it exits 0; none: the image's HEALTHCHECK, else its ports, else running. */
  healthcheck?: { test: string[]; intervalMs: number; timeoutMs: number; retries: number; startPeriodMs: number };
  ports: number[];
  data: string[];
  dependsOn: string[];
  limits: { cpus?: number; memoryBytes?: number; pids?: number };
  /** The field path its declaration came from, for messages: "services.db" or "compose.yaml services.db". */
  source: string;
  /** Other names it is reached by (compose aliases, container_name…): each resolves to 127.0.0.1 like its name. */
  hostNames?: string[];
  /** Files and folders it sees read-only: the repo's (compose volumes), its secrets and configs. */
  files?: ServiceFile[];
  /** Its image is built from the repo (compose `build:`) by the isolated builder, which names it (`image` until then). */
  build?: ServiceBuild;
}

/** What a service's image is built from (sandbox/service-build.ts): paths of the repo at the snapshot's commit. */
export interface ServiceBuild {
  /** The build context, a folder of the repo ('' for its root). */
  context: string;
  /** The Dockerfile, a path of the repo; or `inline`, its text (compose's dockerfile_inline). */
  dockerfile?: string;
  inline?: string;
  args: Record<string, string>;
  /** The stage to build; default the last. */
  target?: string;
}

/**
 * A file or folder a service sees read-only at `target`: a path of the repo
 * (`source`), or `content` given inline (a secret or config from the
 * project's .env or `content:`).
 */
export interface ServiceFile {
  target: string;
  /** The repo's path it is copied from (symlinks resolved within the repo), or the field of its content. */
  source: string;
  content?: string;
  /** Permission bits of the file (default: the repo's, 0644 or 0755). */
  mode?: number;
  /** The git object it was read from at commit `at` (sandbox/repo-files.ts), and what it is. */
  object?: string;
  at?: string;
  kind?: 'file' | 'folder';
}

/** The app as the sandbox starts it. */
export interface AppSpec {
  start: string;
  port: number;
  readyPath: string;
  readyTimeoutMs: number;
  source: string;
  /** Started for the agent too (`app.forAgent`). */
  forAgent?: boolean;
}

/** A health check as Docker writes it → the argv to exec, or undefined for ["NONE"]. */
export function healthArgv(test: string | string[]): string[] | undefined {
  if (typeof test === 'string') return ['sh', '-c', test];
  const [kind, ...rest] = test;
  if (kind === 'NONE') return undefined;
  if (kind === 'CMD-SHELL') return ['sh', '-c', rest.join(' ')];
  if (kind === 'CMD') return rest;
  return test;
}

/** A `services:` block of .drydock/config.yaml as specs. */
export function servicesOfConfig(block: z.infer<typeof servicesBlock>): ServiceSpec[] {
  return Object.entries(block).map(([name, s]) => {
    const test = s.healthcheck && healthArgv(s.healthcheck.test);
    return {
      name,
      image: s.image,
      environment: s.environment ?? {},
      ...(s.command ? { command: s.command } : {}),
      ...(s.entrypoint ? { entrypoint: s.entrypoint } : {}),
      ...(s.user ? { user: s.user } : {}),
      ...(s.workingDir ? { workingDir: s.workingDir } : {}),
      ...(s.healthcheck && test?.length
        ? {
            healthcheck: {
              test,
              intervalMs: durationMs(s.healthcheck.interval),
              timeoutMs: durationMs(s.healthcheck.timeout),
              retries: s.healthcheck.retries,
              startPeriodMs: durationMs(s.healthcheck.startPeriod),
            },
          }
        : {}),
      ports: s.ports ?? [],
      data: s.data ?? [],
      dependsOn: s.dependsOn ?? [],
      limits: {
        ...(s.limits?.cpus !== undefined ? { cpus: s.limits.cpus } : {}),
        ...(s.limits?.memory !== undefined ? { memoryBytes: sizeBytes(s.limits.memory) } : {}),
        ...(s.limits?.pids !== undefined ? { pids: s.limits.pids } : {}),
      },
      source: `services.${name}`,
    };
  });
}

/** An `app:` block as the spec. */
export function appOfConfig(app: AppDeclaration): AppSpec {
  return {
    start: app.start,
    port: app.port,
    readyPath: app.ready.path,
    readyTimeoutMs: durationMs(app.ready.timeout),
    source: 'app',
    ...(app.forAgent ? { forAgent: true } : {}),
  };
}

/**
 * The repo's app: its `app:` block, else its dev container's
 * postStartCommand on its own forwarded port, else its compose dev service's
 * own command on the port it declares (ready on "/" within 60 s).
 */
export function repoApp(
  config: AppDeclaration | undefined,
  devcontainer: { app?: { start: string; port: number; from?: string }; source: string } | undefined,
): AppSpec | undefined {
  if (config) return appOfConfig(config);
  const app = devcontainer?.app;
  if (!app) return undefined;
  const { from, ...rest } = app;
  return {
    ...rest,
    readyPath: '/',
    readyTimeoutMs: 60_000,
    source: `${devcontainer.source} ${from ?? 'postStartCommand'}`,
  };
}

/** Services that depend on one not declared, or on each other in a circle; each problem names the field. */
export function dependencyProblems(services: ServiceSpec[]): string[] {
  const names = new Set(services.map((s) => s.name));
  const problems = services.flatMap((s) =>
    s.dependsOn.filter((d) => !names.has(d)).map((d) => `${s.source}.dependsOn: ${d} is not a declared service`),
  );
  if (problems.length) return problems;
  return startOrder(services)
    ? []
    : [`${services[0].source.replace(/\.[^.]+$/, '')}: the services depend on each other in a circle`];
}

/** The services in an order where each comes after what it depends on; undefined when there is a circle. */
export function startOrder(services: ServiceSpec[]): ServiceSpec[] | undefined {
  const done: ServiceSpec[] = [];
  let left = [...services];
  while (left.length) {
    const ready = left.filter((s) => s.dependsOn.every((d) => done.some((x) => x.name === d)));
    if (!ready.length) return undefined;
    done.push(...ready);
    left = left.filter((s) => !ready.includes(s));
  }
  return done;
}
