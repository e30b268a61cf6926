/**
 * The input of the `pilot` workflow: a frozen task set run against agent
 * configurations, N attempts each (docs/pilot.md). One YAML file (`drydock
 * pilot start <file>`) validated with zod; its JSON Schema
 * (workflows/pilot.schema.json) is generated from this module.
 */
import { z } from 'zod';
import { problemsOf, scriptStep, sessionInputSchema } from '../input';

/** A name that goes into session ids: lower-case letters, digits and "-". */
const name = (max: number) =>
  z
    .string()
    .regex(new RegExp(`^[a-z0-9][a-z0-9-]{0,${max - 1}}$`), `lower-case letters, digits and "-", at most ${max}`);

export const FAULT_KINDS = ['sandbox_killed', 'credentials_rotated', 'stale_snapshot'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export const pilotTaskSchema = z.strictObject({
  id: name(30).describe('Names the task in session ids and the report'),
  repo: sessionInputSchema.shape.repo.optional().describe("Default: the pilot's repo"),
  task: z.string().min(1).max(20_000).describe('What the agent should do, in words'),
  acceptance: z
    .string()
    .min(1)
    .max(2_000)
    .optional()
    .describe(
      "Shell command run in the sandbox after the agent's change passed verification; exit 0 = accepted. Never shown to the agent",
    ),
  tags: z.array(name(30)).max(20).default([]).describe('e.g. backend, ui, tests: the report groups by them'),
  steps: z
    .array(scriptStep)
    .max(100)
    .optional()
    .describe('What a configuration with a script agent (and no steps of its own) runs for this task'),
});

export const pilotConfigurationSchema = z.strictObject({
  name: name(20).describe('Names the configuration in session ids and the report'),
  agent: sessionInputSchema.shape.agent.describe('The agent section of a session input'),
  memory: z
    .boolean()
    .default(true)
    .describe("Repo memory: give the agent the repo's approved notes and keep what it proposes (false: neither)"),
});

export const pilotFaultSchema = z.strictObject({
  kind: z
    .enum(FAULT_KINDS)
    .describe(
      'sandbox_killed: its sandbox is killed while the agent works; credentials_rotated: the worker rotates its ' +
        'credentials while the session waits for review; stale_snapshot: the session starts from the oldest snapshot kept',
    ),
  task: name(30).describe('The task whose sessions take the fault'),
  configuration: name(20).optional().describe('Only this configuration; default all'),
  attempt: z.number().int().min(1).max(8).optional().describe('Only this attempt; default all'),
});

export const pilotInputSchema = z
  .strictObject({
    name: name(40).describe('The pilot: workflow id pilot-<name>; started again with the same name, it resumes'),
    repo: sessionInputSchema.shape.repo.optional().describe('The repo of tasks that name none'),
    requestedBy: z.string().min(1).max(200).optional(),
    configurations: z.array(pilotConfigurationSchema).min(1).max(8),
    attempts: z.number().int().min(1).max(8).default(1).describe('Sessions per task and configuration'),
    concurrency: z
      .number()
      .int()
      .min(1)
      .max(32)
      .default(2)
      .describe("Sessions working at once (until their approval gate), within the operator's limit"),
    publish: z
      .boolean()
      .default(false)
      .describe(
        "false: every session ends at the approval gate (a person's decision recorded, nothing pushed); " +
          'true: an approved change is published as `session.publish` says',
      ),
    session: z
      .strictObject({
        verify: sessionInputSchema.shape.verify,
        publish: sessionInputSchema.shape.publish.unwrap().omit({ branch: true }).partial().optional(),
        approval: sessionInputSchema.shape.approval,
        limits: sessionInputSchema.shape.limits,
      })
      .partial()
      .prefault({})
      .describe("Every session's settings (as in a session input)"),
    faults: z.array(pilotFaultSchema).max(100).default([]).describe('Faults on purpose, and which sessions take them'),
    tasks: z.array(pilotTaskSchema).min(1).max(500),
  })
  .superRefine((pilot, ctx) => {
    const duplicate = (list: { id?: string; name?: string }[], key: 'id' | 'name', path: string) => {
      const seen = new Set<string>();
      list.forEach((item, i) => {
        const value = item[key]!;
        if (seen.has(value)) ctx.addIssue({ code: 'custom', path: [path, i, key], message: `${value} appears twice` });
        seen.add(value);
      });
    };
    duplicate(pilot.tasks, 'id', 'tasks');
    duplicate(pilot.configurations, 'name', 'configurations');
    pilot.tasks.forEach((t, i) => {
      if (!t.repo && !pilot.repo)
        ctx.addIssue({ code: 'custom', path: ['tasks', i, 'repo'], message: 'required when the pilot names no repo' });
    });
    const sessions = pilot.tasks.length * pilot.configurations.length * pilot.attempts;
    if (sessions > MAX_PILOT_SESSIONS) {
      ctx.addIssue({
        code: 'custom',
        path: ['tasks'],
        message: `${sessions} sessions (tasks × configurations × attempts); at most ${MAX_PILOT_SESSIONS}`,
      });
    }
    pilot.faults.forEach((f, i) => {
      if (!pilot.tasks.some((t) => t.id === f.task))
        ctx.addIssue({ code: 'custom', path: ['faults', i, 'task'], message: `no task ${f.task}` });
      if (f.configuration && !pilot.configurations.some((c) => c.name === f.configuration))
        ctx.addIssue({
          code: 'custom',
          path: ['faults', i, 'configuration'],
          message: `no configuration ${f.configuration}`,
        });
      if (f.attempt && f.attempt > pilot.attempts)
        ctx.addIssue({ code: 'custom', path: ['faults', i, 'attempt'], message: `the pilot runs ${pilot.attempts}` });
    });
  });

/** A pilot's sessions at most: its history stays bounded (it continues as new). */
export const MAX_PILOT_SESSIONS = 1000;

export type PilotInput = z.infer<typeof pilotInputSchema>;
export type PilotInputDraft = z.input<typeof pilotInputSchema>;
export type PilotTask = z.infer<typeof pilotTaskSchema>;
export type PilotConfiguration = z.infer<typeof pilotConfigurationSchema>;

export function parsePilotInput(raw: unknown): { ok: true; input: PilotInput } | { ok: false; problems: string[] } {
  const parsed = pilotInputSchema.safeParse(raw);
  return parsed.success ? { ok: true, input: parsed.data } : { ok: false, problems: problemsOf(parsed.error) };
}
