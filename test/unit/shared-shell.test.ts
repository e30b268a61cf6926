/**
 * Several people at one shell (sandbox/shared-shell.ts), with `cat` on pipes
 * standing in for the sandbox's TTY: each typist's keys reach the shell and
 * everyone sees its output; a watcher's keys and resizes go nowhere; a late
 * joiner gets the last output first; the shell ends when its last typist
 * leaves, watchers or not. Who is in a session (SessionPeople) is told to
 * each of its pages at every change.
 */
import { spawn } from 'node:child_process';
import { Duplex } from 'node:stream';
import type { SandboxShell, TtySize } from '../../sandbox/provider';
import { SessionPeople, SessionShells, SharedShell, type Person } from '../../sandbox/shared-shell';

function catShell(resized: TtySize[]): SandboxShell & { exited: Promise<void> } {
  const child = spawn('cat', [], { stdio: ['pipe', 'pipe', 'ignore'] });
  const stream = Duplex.from({ writable: child.stdin, readable: child.stdout });
  stream.on('close', () => child.kill());
  return {
    stream,
    resize: async (size) => void resized.push(size),
    exitCode: () => new Promise((resolve) => child.on('exit', (code) => resolve(code ?? -1))),
    exited: new Promise((resolve) => child.on('exit', () => resolve())),
  };
}

/** Everything a view shows, as text, and whether it ended. */
function screen(view: SandboxShell) {
  const seen = { text: '', ended: false };
  view.stream.on('data', (chunk: Buffer) => (seen.text += chunk.toString()));
  view.stream.on('end', () => (seen.ended = true));
  return seen;
}

async function until(what: () => boolean, ms = 5000): Promise<void> {
  for (const end = Date.now() + ms; !what(); await new Promise((r) => setTimeout(r, 20))) {
    if (Date.now() > end) throw new Error('timed out');
  }
}

test("two typists and a watcher: both typists' keys reach the shell, all three see it, the watcher's go nowhere", async () => {
  const resized: TtySize[] = [];
  const cat = catShell(resized);
  let ended = false;
  const shared = new SharedShell(cat, () => (ended = true));
  const alice = shared.join({ who: 'alice', watching: false });
  const aliceSees = screen(alice);
  alice.stream.write('from alice\n');
  await until(() => aliceSees.text.includes('from alice'));

  // A late joiner gets what was on the screen, then what comes.
  const bob = shared.join({ who: 'bob', watching: false });
  const bobSees = screen(bob);
  const dave = shared.join({ who: 'dave', watching: true });
  const daveSees = screen(dave);
  bob.stream.write('from bob\n');
  dave.stream.write('from dave\n');
  await dave.resize({ cols: 10, rows: 10 });
  await bob.resize({ cols: 100, rows: 30 });
  await until(() => daveSees.text.includes('from bob') && aliceSees.text.includes('from bob'));
  expect(bobSees.text).toBe('from alice\nfrom bob\n');
  expect(daveSees.text).toBe('from alice\nfrom bob\n');
  expect(aliceSees.text).toBe('from alice\nfrom bob\n');
  expect(resized).toEqual([{ cols: 100, rows: 30 }]);

  // Who is at the shell.
  const everyone = [
    { who: 'alice', watching: false },
    { who: 'bob', watching: false },
    { who: 'dave', watching: true },
  ];
  expect(shared.people()).toEqual(everyone);

  // Alice leaves: the shell goes on for Bob.
  (alice.stream as unknown as Duplex).destroy();
  expect(shared.people()).toEqual(everyone.slice(1));
  bob.stream.write('still here\n');
  await until(() => daveSees.text.includes('still here'));
  expect(shared.open).toBe(true);

  // The last typist leaves: the shell ends, and the watcher's view with it.
  (bob.stream as unknown as Duplex).destroy();
  await until(() => daveSees.ended);
  await cat.exited;
  expect(ended).toBe(true);
  expect(shared.open).toBe(false);
});

test('the shell exiting ends every view; the session then opens a new one', async () => {
  const shells = new SessionShells();
  const first = catShell([]);
  const shared = await shells.getOrOpen('s-1', async () => first);
  expect(await shells.getOrOpen('s-1', () => Promise.reject(new Error('not opened twice')))).toBe(shared);
  const view = shared.join({ who: 'alice', watching: false });
  const seen = screen(view);
  first.stream.end(); // cat exits at the end of its input
  await until(() => seen.ended);
  expect(shells.get('s-1')).toBeUndefined();
  const next = await shells.getOrOpen('s-1', async () => catShell([]));
  expect(next).not.toBe(shared);
  const late = shared.join({ who: 'bob', watching: false });
  const lateSees = screen(late);
  await until(() => lateSees.ended);
  (next.join({ who: 'x', watching: false }).stream as unknown as Duplex).destroy();
});

test('who is in a session, by any way in: every page hears the list at each arrival and departure, its own included', () => {
  const people = new SessionPeople();
  const told: Record<string, Person[][]> = { alice: [], bob: [], dave: [], other: [] };
  const alice = people.join('s1', { who: 'alice', way: 'editor', watching: false }, (p) => told.alice.push(p));
  expect(told.alice).toEqual([[{ who: 'alice', way: 'editor', watching: false }]]);
  const bob = people.join('s1', { who: 'bob', way: 'terminal', watching: false }, (p) => told.bob.push(p));
  const dave = people.join('s1', { who: 'dave', way: 'editor', watching: true }, (p) => told.dave.push(p));
  people.join('s2', { who: 'other', way: 'desktop', watching: false }, (p) => told.other.push(p));
  const everyone: Person[] = [
    { who: 'alice', way: 'editor', watching: false },
    { who: 'bob', way: 'terminal', watching: false },
    { who: 'dave', way: 'editor', watching: true },
  ];
  expect(told.alice.at(-1)).toEqual(everyone);
  expect(told.bob.at(-1)).toEqual(everyone);
  expect(told.dave).toEqual([everyone]);
  // Another session's people are not this one's, nor told of it.
  expect(told.other).toEqual([[{ who: 'other', way: 'desktop', watching: false }]]);

  alice();
  alice(); // leaving twice is leaving once
  expect(told.bob.at(-1)).toEqual(everyone.slice(1));
  expect(told.alice).toHaveLength(3);
  expect(told.dave).toHaveLength(2);
  bob();
  dave();
  expect(people.people('s1')).toEqual([]);
  expect(people.people('s2')).toEqual([{ who: 'other', way: 'desktop', watching: false }]);
});
