/**
 * JSON Schemas generated from the zod schemas (npm run schema): the session
 * input, with the argument "repo-config" a repo's .drydock/config.yaml, with
 * "pilot" a pilot file.
 */
import { z } from 'zod';
import { sessionInputSchema } from '../workflows/input';
import { repoConfigSchema } from '../workflows/repo-config';
import { pilotInputSchema } from '../workflows/pilot/input';

export function sessionInputJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(sessionInputSchema, { io: 'input', target: 'draft-2020-12' }),
    title: 'agentSession input',
    description: 'Input of the drydock agentSession workflow; only repo.url and task are required.',
  };
}

export function repoConfigJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(repoConfigSchema, { io: 'input', target: 'draft-2020-12' }),
    title: 'drydock repo configuration (.drydock/config.yaml)',
    description:
      "A repo's own drydock settings; every field is optional and can only ask for less than the operator's limits.",
  };
}

export function pilotJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(pilotInputSchema, { io: 'input', target: 'draft-2020-12' }),
    title: 'drydock pilot file',
    description:
      'A frozen task set run against agent configurations, N attempts each (drydock pilot start <file>; docs/pilot.md).',
  };
}

if (require.main === module) {
  const kind = process.argv[2];
  const schema =
    kind === 'repo-config' ? repoConfigJsonSchema() : kind === 'pilot' ? pilotJsonSchema() : sessionInputJsonSchema();
  process.stdout.write(JSON.stringify(schema, null, 2) + '\n');
}
