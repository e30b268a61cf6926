/**
 * Repo memory over HTTP (workers/routes/notes.ts) against a real (embedded)
 * PostgreSQL: a reader sees a repo's notes and no other repo's, only an
 * approver decides, a decision is a version and an audit event, the body is
 * bounded, and the console's page posts JSON from its script.
 */
import { Readable } from 'node:stream';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import { Roles } from '../../identity/roles';
import { RepoNotes } from '../../repos/notes';
import { AuditTrail } from '../../store/audit';
import type { Database } from '../../store/db';
import { Redactor } from '../../platform/scrub';
import { serveNotesRoute } from '../../workers/routes/notes';
import { HttpError, type ServeContext } from '../../workers/http';
import { openEmbeddedDatabase } from '../support/helpers';

let db: Database;
let ctx: ServeContext;
let trail: AuditTrail;
let shopNote: number;
let docsNote: number;

beforeAll(async () => {
  db = await openEmbeddedDatabase();
  trail = new AuditTrail(db.pool, 'test', new Redactor(), randomBytes(32));
  ctx = {
    pool: db.pool,
    audit: trail,
    identities: {
      roles: new Roles({ 'acme/shop': { approver: ['alice'], reader: ['dave'] }, 'acme/docs': { approver: ['erin'] } }),
    },
  } as unknown as ServeContext;
  const notes = new RepoNotes(db.pool);
  [{ id: shopNote }] = await notes.propose('acme/shop', 'sess-shop', 1, ['run make check']);
  [{ id: docsNote }] = await notes.propose('acme/docs', 'sess-docs', 1, ['docs build with mkdocs']);
});
afterAll(() => db?.close());

/** Serves one request; the answer's status and JSON (or HTML). */
async function call(method: string, path: string, who: string, body?: unknown) {
  const text = body === undefined ? '' : JSON.stringify(body);
  const req = Object.assign(Readable.from(text ? [Buffer.from(text)] : []), {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json', 'content-length': String(text.length) },
  }) as unknown as IncomingMessage;
  const answer = { status: 0, body: '' };
  const res = {
    writeHead: (status: number) => void (answer.status = status),
    end: (b: string) => void (answer.body = b),
  } as unknown as ServerResponse;
  try {
    const served = await serveNotesRoute(ctx, req, res, new URL(path, 'http://drydock'), who);
    if (!served) return { status: 404, body: undefined };
  } catch (err) {
    if (err instanceof HttpError) return { status: err.status, body: err.message };
    throw err;
  }
  return { status: answer.status, body: answer.body.startsWith('<') ? answer.body : JSON.parse(answer.body) };
}

test("a reader lists a repo's notes and not another repo's; a note they may not read is a 404", async () => {
  const listed = await call('GET', '/api/notes', 'dave');
  expect(listed.body.map((n: { id: number }) => n.id)).toEqual([shopNote]);
  expect((await call('GET', `/api/notes/${docsNote}`, 'dave')).status).toBe(404);
  expect((await call('GET', `/api/notes/${shopNote}`, 'dave')).body.versions).toHaveLength(1);
});

test('only an approver of the repo decides; the decision is a version and an audit event', async () => {
  expect(await call('POST', `/api/notes/${shopNote}`, 'dave', { action: 'approve' })).toMatchObject({ status: 403 });
  // Another repo's approver does not read this one's notes: a 404, as for a note that does not exist.
  expect(await call('POST', `/api/notes/${shopNote}`, 'erin', { action: 'approve' })).toMatchObject({ status: 404 });
  const approved = await call('POST', `/api/notes/${shopNote}`, 'alice', {
    action: 'approve',
    text: 'run `make check`',
  });
  expect(approved).toMatchObject({ status: 200, body: { status: 'approved', version: 2, text: 'run `make check`' } });
  const events = await trail.events('notes:acme/shop');
  expect(events.map((e) => [e.kind, e.actor, e.data.action, e.data.version])).toEqual([
    ['note', 'alice', 'approve', 2],
  ]);
  const dropped = await call('POST', `/api/notes/${shopNote}`, 'alice', { action: 'drop' });
  expect(dropped.body.status).toBe('dropped');
  expect(await call('POST', `/api/notes/${shopNote}`, 'alice', { action: 'approve' })).toMatchObject({ status: 409 });
});

test('a decision is JSON with a known action and a bounded text', async () => {
  expect(await call('POST', `/api/notes/${docsNote}`, 'erin', { action: 'publish' })).toMatchObject({ status: 422 });
  expect(
    await call('POST', `/api/notes/${docsNote}`, 'erin', { action: 'edit', text: 'x'.repeat(1_001) }),
  ).toMatchObject({ status: 422 });
  expect(await call('POST', '/api/notes/1e3', 'erin', { action: 'drop' })).toMatchObject({ status: 404 });
});

test("the console's page lists the proposed notes a person reads, with buttons for its script and no form", async () => {
  const page = await call('GET', '/notes', 'erin');
  expect(page.status).toBe(200);
  expect(page.body).toContain('docs build with mkdocs');
  expect(page.body).not.toContain('make check');
  expect(page.body).toContain(`data-note="${docsNote}" data-action="approve"`);
  expect(page.body).toContain('src="/assets/console/notes.js"');
  expect(page.body).not.toContain('<form method="post" action="/api/notes');
});
