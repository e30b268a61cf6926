import { hostname } from 'node:os';
import path from 'node:path';
import { z } from 'zod';

/** The project folder; `data/` and `.tools/` live under it unless configured. */
export const projectRoot = path.resolve(__dirname, '..');

const configSchema = z.object({
  TEMPORAL_ADDRESS: z.string().min(1).default('localhost:7233'),
  TEMPORAL_NAMESPACE: z.string().min(1).default('default'),
  DRYDOCK_TASK_QUEUE: z.string().min(1).default('drydock'),
  /** Local state: Temporal's database file, artifacts, git mirrors. */
  DRYDOCK_DATA_DIR: z.string().min(1).default(path.join(projectRoot, 'data')),
  /** Names this Docker host; sandbox activities of a session run on `<queue>@<host id>`. */
  DRYDOCK_HOST_ID: z
    .string()
    .regex(/^[A-Za-z0-9._-]+$/, 'letters, digits, ".", "_" and "-" only')
    .default(hostname()),
  /** Sandbox base image; by default the tag built from sandbox-images/base. */
  DRYDOCK_BASE_IMAGE: z.string().min(1).optional(),
  /** Base URL of the Temporal Web UI, for links printed by the CLI. */
  DRYDOCK_TEMPORAL_UI: z.string().url().default('http://localhost:8233'),
  /** Who the CLI acts as when approving or rejecting (default: the OS user). */
  DRYDOCK_USER: z.string().min(1).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
});

export type Config = z.infer<typeof configSchema>;

export class ConfigError extends Error {}

/** Parses the environment once; a bad value names the variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = configSchema.safeParse(env);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`);
    throw new ConfigError(`invalid environment: ${problems.join('; ')}`);
  }
  return parsed.data;
}
