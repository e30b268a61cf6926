/**
 * A local Linear: its GraphQL API for the operations drydock uses, executed
 * by graphql-js against a subset of Linear's schema (types and field names as
 * Linear's own), so a query Linear would refuse is refused here too; the API
 * key in the Authorization header as Linear reads it; and webhook deliveries
 * to drydock serve, signed like Linear signs them (Linear-Signature: the
 * HMAC-SHA256 of the body, hex).
 */
import { createHmac, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { buildSchema, graphql } from 'graphql';

/** The part of Linear's schema drydock touches (names and types as in Linear's schema.graphql). */
const SCHEMA = buildSchema(`
  type Query {
    "One specific issue."
    issue(id: String!): Issue!
  }
  type Mutation {
    "Creates a new comment."
    commentCreate(input: CommentCreateInput!): CommentPayload!
  }
  type Issue {
    id: ID!
    identifier: String!
    title: String!
    url: String!
    comments(first: Int, after: String, last: Int, before: String): CommentConnection!
  }
  type CommentConnection {
    nodes: [Comment!]!
  }
  type Comment {
    id: ID!
    body: String!
    url: String!
    createdAt: String!
  }
  type CommentPayload {
    lastSyncId: Float!
    comment: Comment!
    success: Boolean!
  }
  input CommentCreateInput {
    id: String
    body: String
    bodyData: String
    issueId: String
    parentId: String
    createAsUser: String
    doNotSubscribeToIssue: Boolean
  }
`);

export interface LinearIssue {
  id: string;
  identifier: string;
  title: string;
  description: string;
  teamKey: string;
  comments: { id: string; body: string; createdAt: string }[];
}

export interface FakeLinear {
  apiUrl: string;
  issues: Map<string, LinearIssue>;
  /** GraphQL operations received, by operation name. */
  operations: string[];
  /** Adds an issue; resolves with it. */
  addIssue(identifier: string, title: string, description?: string): LinearIssue;
  /** Sends an Issue webhook (signed with `secret` unless `signature` is given) to serve's /webhooks/linear. */
  deliver(
    serve: string,
    payload: unknown,
    opts?: { secret?: string; signature?: string },
  ): Promise<{ status: number; body: any }>;
  /** The Issue event Linear sends when `actor` adds `label` to the issue. */
  labelled(issue: LinearIssue, actor: string, label?: string): Record<string, unknown>;
  close(): Promise<void>;
}

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

export async function startFakeLinear(opts: { apiKey: string; secret: string }): Promise<FakeLinear> {
  const issues = new Map<string, LinearIssue>();
  const operations: string[] = [];
  let syncId = 1000;
  const fail = (message: string, type: string) => Object.assign(new Error(message), { extensions: { type } });
  const issueOf = (id: string) => {
    const issue = issues.get(id);
    if (!issue) throw fail('Entity not found: Issue', 'invalid input');
    return issue;
  };
  const root = {
    issue: ({ id }: { id: string }) => {
      const issue = issueOf(id);
      return {
        ...issue,
        url: `https://linear.app/drydock/issue/${issue.identifier}`,
        comments: () => ({
          nodes: issue.comments.map((c) => ({
            ...c,
            url: `https://linear.app/drydock/issue/${issue.identifier}#comment-${c.id}`,
          })),
        }),
      };
    },
    commentCreate: ({ input }: { input: { id?: string; body?: string; issueId?: string } }) => {
      if (!input.issueId) throw fail('issueId is required', 'invalid input');
      const issue = issueOf(input.issueId);
      if (input.id !== undefined && !UUID_V4.test(input.id)) throw fail('id must be a UUID v4', 'invalid input');
      const id = input.id ?? randomUUID();
      if (issue.comments.some((c) => c.id === id)) throw fail('Entity already exists', 'invalid input');
      const comment = { id, body: input.body ?? '', createdAt: new Date().toISOString() };
      issue.comments.push(comment);
      return {
        lastSyncId: ++syncId,
        success: true,
        comment: { ...comment, url: `https://linear.app/drydock/issue/${issue.identifier}#comment-${id}` },
      };
    },
  };

  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const send = (status: number, data: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
      res.end(JSON.stringify(data));
    };
    if (req.method !== 'POST' || new URL(req.url!, 'http://x').pathname !== '/graphql')
      return send(404, { errors: [{ message: 'Not found' }] });
    if (req.headers.authorization !== opts.apiKey) {
      return send(400, {
        errors: [
          { message: 'Authentication required, not authenticated', extensions: { type: 'authentication error' } },
        ],
      });
    }
    const { query, variables, operationName } = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}');
    const name = operationName ?? /(?:query|mutation)\s+(\w+)/.exec(query ?? '')?.[1] ?? 'anonymous';
    operations.push(name);
    const result = await graphql({ schema: SCHEMA, source: query ?? '', rootValue: root, variableValues: variables });
    const errors = result.errors?.map((e) => ({
      message: e.message,
      extensions: (e.originalError as any)?.extensions ?? { type: 'graphql error' },
    }));
    send(errors?.length ? 400 : 200, {
      ...(result.data ? { data: result.data } : {}),
      ...(errors?.length ? { errors } : {}),
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  let number = 0;

  return {
    apiUrl: `${url}/graphql`,
    issues,
    operations,
    addIssue(identifier, title, description = '') {
      const issue = {
        id: randomUUID(),
        identifier,
        title,
        description,
        teamKey: identifier.split('-')[0],
        comments: [],
      };
      issues.set(issue.id, issue);
      return issue;
    },
    labelled(issue, actor, label = 'drydock') {
      const labelId = randomUUID();
      return {
        action: 'update',
        actor: { id: actor, type: 'user', name: 'Someone' },
        createdAt: new Date().toISOString(),
        data: {
          id: issue.id,
          identifier: issue.identifier,
          number: ++number,
          title: issue.title,
          description: issue.description,
          url: `https://linear.app/drydock/issue/${issue.identifier}`,
          teamId: randomUUID(),
          team: { id: randomUUID(), key: issue.teamKey, name: issue.teamKey },
          labelIds: [labelId],
          labels: [{ id: labelId, name: label, color: '#5e6ad2' }],
          assigneeId: null,
          updatedAt: new Date().toISOString(),
        },
        updatedFrom: { labelIds: [], updatedAt: new Date(Date.now() - 60_000).toISOString() },
        type: 'Issue',
        url: `https://linear.app/drydock/issue/${issue.identifier}`,
        organizationId: randomUUID(),
        webhookTimestamp: Date.now(),
        webhookId: randomUUID(),
      };
    },
    async deliver(serve, payload, o = {}) {
      const body = JSON.stringify(payload);
      const signature =
        o.signature ??
        createHmac('sha256', o.secret ?? opts.secret)
          .update(body)
          .digest('hex');
      const res = await fetch(`${serve}/webhooks/linear`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json; charset=utf-8',
          'linear-delivery': randomUUID(),
          'linear-event': 'Issue',
          'linear-signature': signature,
        },
        body,
      });
      return { status: res.status, body: await res.json().catch(() => undefined) };
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
