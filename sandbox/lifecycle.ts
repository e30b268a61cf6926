/**
 * A dev container's lifecycle commands as setup: their form (a string, an
 * argv array, or an object of named commands), each as shell, and the order
 * the Dev Container CLI runs them in: hook by hook (onCreateCommand, then
 * updateContentCommand, then postCreateCommand), each hook's commands from
 * the features first, in install order, then devcontainer.json's own (the
 * CLI's `devcontainer.metadata` entries in turn). Pure.
 */
import { z } from 'zod';

/** A lifecycle command as devcontainer.json and devcontainer-feature.json give it. */
export const lifecycleCommand = z.union([
  z.string(),
  z.array(z.string()).min(1),
  z.record(z.string(), z.union([z.string(), z.array(z.string()).min(1)])),
]);

/** The hooks drydock runs as setup, in the order the CLI runs them, once, when the container is made. */
export const SETUP_HOOKS = ['onCreateCommand', 'updateContentCommand', 'postCreateCommand'] as const;

/** The setup hooks of one metadata entry (a feature's, or devcontainer.json's), each as shell. */
export type Lifecycle = Partial<Record<(typeof SETUP_HOOKS)[number], string>>;

/** A lifecycle command as shell: a string as it is, an array as quoted argv, an object's commands in turn. */
export function commandShell(value: z.infer<typeof lifecycleCommand>): string {
  const argv = (words: string[]) => words.map((w) => `'${w.replace(/'/g, `'\\''`)}'`).join(' ');
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return argv(value);
  return Object.values(value)
    .map((v) => (typeof v === 'string' ? `(${v})` : argv(v)))
    .join(' && ');
}

/** The setup hooks of a parsed devcontainer.json or devcontainer-feature.json, as shell. */
export function lifecycleOf(entry: Partial<Record<(typeof SETUP_HOOKS)[number], z.infer<typeof lifecycleCommand>>>) {
  const out: Lifecycle = {};
  for (const hook of SETUP_HOOKS) {
    const value = entry[hook];
    if (value !== undefined) out[hook] = commandShell(value);
  }
  return out;
}

/**
 * The setup hooks of several entries as one shell command, in the CLI's
 * order (hook by hook, the entries in turn); undefined when none has one.
 */
export function lifecycleScript(entries: Lifecycle[]): string | undefined {
  const commands = SETUP_HOOKS.flatMap((hook) => entries.map((e) => e[hook]).filter((c) => c !== undefined));
  return commands.length ? commands.join(' && ') : undefined;
}
