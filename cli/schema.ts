/**
 * JSON Schemas generated from the zod schemas (npm run schema): the session
 * input, and with the argument "repo-config", a repo's .drydock/config.yaml.
 */
import { z } from 'zod';
import { sessionInputSchema } from '../workflows/input';
import { repoConfigSchema } from '../workflows/repo-config';

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

if (require.main === module) {
  const schema = process.argv[2] === 'repo-config' ? repoConfigJsonSchema() : sessionInputJsonSchema();
  process.stdout.write(JSON.stringify(schema, null, 2) + '\n');
}
