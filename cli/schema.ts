/** The JSON Schema of the session input, generated from the zod schema (npm run schema). */
import { z } from 'zod';
import { sessionInputSchema } from '../workflows/input';

export function sessionInputJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(sessionInputSchema, { io: 'input', target: 'draft-2020-12' }),
    title: 'agentSession input',
    description: 'Input of the drydock agentSession workflow; only repo.url and task are required.',
  };
}

if (require.main === module) {
  process.stdout.write(JSON.stringify(sessionInputJsonSchema(), null, 2) + '\n');
}
