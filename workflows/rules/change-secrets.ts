/**
 * A change that holds the value of a secret the worker knows is never
 * published and never shown: what the session's status and the agent are
 * told about it. Pure, so the workflow and the activities say the same.
 */

/** A secret a change holds: its name (the worker's variable), and where (a path, or "the commit message"). */
export interface SecretFound {
  secret: string;
  where: string;
}

/** One line naming each secret and where it is (never its value). */
export function describeSecrets(found: SecretFound[]): string {
  const where = found.map((f) => `${f.secret} in ${f.where}`);
  const shown = where.slice(0, 5).join(', ') + (where.length > 5 ? ` and ${where.length - 5} more` : '');
  return `the change holds the value of a secret the worker holds (${shown}): drydock never publishes it`;
}

/** What an agent is told when its change was refused for a secret, so its next round can remove it. */
export function secretFeedback(found: SecretFound[], attempt: number, maxRounds: number): string {
  return [
    `Your change was refused (attempt ${attempt} of ${maxRounds + 1}): ${describeSecrets(found)}.`,
    'Remove the secret from every file of the change (do not print it or encode it), then finish again.',
  ].join('\n\n');
}
