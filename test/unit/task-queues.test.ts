/**
 * The two task queues' activity sets (activities/index.ts): what works in a
 * sandbox is served by its host's queue only, and the proxies are typed by
 * the set their queue serves, so a host-bound call on the shared queue is a
 * compile error (the @ts-expect-error lines below fail `tsc` if it ever
 * compiles) and, at run time, no worker of the shared queue has it.
 */
import {
  createHostActivities,
  createSharedActivities,
  type ActivityDeps,
  type HostActivities,
  type SharedActivities,
} from '../../activities';
import { Redactor } from '../../platform/scrub';

// Building the sets only captures their dependencies (and reads the forges' settings): nothing is called.
const deps = { redactor: new Redactor([]), github: { apiUrl: 'https://api.github.com' } } as unknown as ActivityDeps;
const shared = Object.keys(createSharedActivities(deps)).sort();
const host = Object.keys(createHostActivities(deps)).sort();

/** Served by either queue: a teardown after a failed provisioning, and a build planned before its host is known. */
const EITHER = ['destroySandbox', 'startSnapshotBuild'];

test('the shared and host sets meet only where either queue may serve', () => {
  expect(shared.filter((name) => host.includes(name))).toEqual(EITHER);
});

test('everything that works in an existing sandbox is on its host queue only', () => {
  const inSandbox = ['runStep', 'runTool', 'commitChanges', 'verifyInBrowser', 'pushBranch', 'finishSnapshotBuild'];
  expect(host).toEqual(expect.arrayContaining(inSandbox));
  expect(shared.filter((name) => inSandbox.includes(name))).toEqual([]);
});

test('a host-bound activity on the shared proxy does not compile', () => {
  const onShared = (activities: SharedActivities) => {
    // @ts-expect-error runStep works in a sandbox: only its host's queue serves it
    return activities.runStep;
  };
  const onHost = (activities: HostActivities) => {
    // @ts-expect-error repoPolicy is the shared queue's (it runs before any sandbox exists)
    return activities.repoPolicy;
  };
  expect([onShared, onHost]).toHaveLength(2);
});
