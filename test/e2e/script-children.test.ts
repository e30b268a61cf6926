/**
 * Child sessions from a script step (docs/agents.md, Child sessions) on real
 * Temporal, Docker, git and PostgreSQL: the script's step runs
 * `drydock-child "<task>"` twice at once (and a third time, past
 * children.max); each call reaches the step's gateway at /mcp/drydock, the
 * session starts the child (the same script, its task in $DRYDOCK_TASK, its
 * own sandbox), and the command prints the child's outcome, fenced words and
 * diff path, exiting 0 when the child completed; the third is refused (exit
 * 2). The script takes one child's diff with `git apply`; only that change is
 * pushed, and every call is in the audit trail.
 */
import { status as statusQuery } from '../../workflows/api';
import {
  approvePush,
  containersOf,
  git,
  makeFixtureRepo,
  newSessionId,
  startSession,
  startStack,
  type TestStack,
  auditData,
} from '../support/helpers';

let stack: TestStack;

beforeAll(async () => {
  stack = await startStack();
}, 600_000);
afterAll(async () => {
  await stack?.stop();
});

/** A child does its task; the parent starts two children at once, a third past the cap, and takes the TWO one's diff. */
const STEP = `
if [ -n "$DRYDOCK_TASK" ]; then
  case "$DRYDOCK_TASK" in *ONE*) echo one > ONE.md ;; *) echo two > TWO.md ;; esac
  echo hello >> README.md
  exit 0
fi
drydock-child "greet in README.md and add ONE.md" > /tmp/one.out & one=$!
drydock-child "greet in README.md and add TWO.md" > /tmp/two.out & two=$!
wait $one; a=$?
wait $two; b=$?
drydock-child "a third" > /tmp/three.out 2>&1; c=$?
ended() { head -1 "$1" | sed 's/.* ended: //'; }
printf 'one=%s %s\\ntwo=%s %s\\nthird=%s %s\\n' "$a" "$(ended /tmp/one.out)" "$b" "$(ended /tmp/two.out)" \\
  "$c" "$(grep -c 'children.max' /tmp/three.out)" > RESULTS.txt
cat /tmp/one.out /tmp/two.out /tmp/three.out
git apply "$(grep -o '/tmp/drydock-children/[^: ]*[.]diff' /tmp/two.out | head -1)"
`;

test("a script's step starts two children with drydock-child, reads their outcomes and takes one's diff", async () => {
  const repo = await makeFixtureRepo();
  const id = newSessionId('script-kids');
  const handle = await startSession(stack, id, {
    repo: { url: repo.url },
    task: 'greet, with two child sessions doing the work',
    agent: { kind: 'script', steps: [{ run: STEP, timeout: '40m', children: true }] },
    verify: { test: 'sh check.sh' },
    children: { max: 2 },
  });
  const final = await approvePush(handle, 'alice', 2_400_000);
  expect(final.phase).toBe('completed');
  const childIds = [`${id}.child-1`, `${id}.child-2`];
  // The command's exit codes and the outcome it printed; the third call refused by children.max.
  expect(git(['show', `drydock/${id}:RESULTS.txt`], repo.bare)).toBe('one=0 completed\ntwo=0 completed\nthird=2 1\n');
  // Only the TWO child's change was taken.
  expect(git(['show', `drydock/${id}:README.md`], repo.bare)).toBe('# fixture\nhello\n');
  expect(git(['show', `drydock/${id}:TWO.md`], repo.bare)).toBe('two\n');
  expect(git(['ls-tree', '--name-only', `drydock/${id}`], repo.bare).split('\n')).not.toContain('ONE.md');

  expect(final.children?.map((c) => [c.sessionId, c.phase, c.verified])).toEqual(
    childIds.map((c) => [c, 'completed', true]),
  );
  expect(final.timeline.map((t) => t.name)).toEqual(expect.arrayContaining(['child: completed', 'child: refused']));
  for (const childId of childIds) {
    const kid = await stack.client.workflow.getHandle(childId).query(statusQuery);
    expect(kid).toMatchObject({ phase: 'completed', childOf: id });
    expect(kid.pushed).toBeUndefined();
  }
  // Each call audited as an agent CLI's: the step, through the gateway, the child or why it was refused.
  const calls = (await auditData(id, 'tool_call')).filter((d) => d.tool === 'start_child');
  expect(calls).toHaveLength(3);
  expect(
    calls
      .filter((d) => d.ok)
      .map((d) => d.child)
      .sort(),
  ).toEqual(childIds);
  expect(calls.find((d) => !d.ok)).toMatchObject({ step: 'step-1', via: 'gateway' });
  expect(calls.find((d) => !d.ok)?.refused).toContain('children.max');
  for (const sessionId of [id, ...childIds]) expect(await containersOf(sessionId)).toHaveLength(0);
}, 2_700_000);
