/**
 * Linear's GraphQL API, the two operations drydock needs: an issue's comment
 * ids, and creating a comment. A comment's id is chosen by drydock (Linear
 * takes a UUID from the client), derived from the session and the milestone,
 * and looked for before posting: a retried activity posts nothing twice.
 */
import { createHash } from 'node:crypto';

export interface LinearSettings {
  /** A personal API key (lin_api_…) or an OAuth token (sent as Bearer). */
  apiKey: string;
  /** @default https://api.linear.app/graphql */
  apiUrl: string;
}

/** Linear answered with errors: `status` is the HTTP status, `type` Linear's error type when it gave one. */
export class LinearError extends Error {
  name = 'LinearError';
  constructor(
    message: string,
    readonly status: number,
    readonly type?: string,
  ) {
    super(message);
  }
}

const COMMENT_IDS = `query DrydockIssueComments($id: String!) {
  issue(id: $id) { id comments(first: 250) { nodes { id } } }
}`;

const CREATE_COMMENT = `mutation DrydockComment($input: CommentCreateInput!) {
  commentCreate(input: $input) { success comment { id url } }
}`;

/** A UUID (version 4 layout, as Linear requires) that is the same for the same key. */
export function stableUuid(key: string): string {
  const h = createHash('sha256').update(key).digest('hex');
  const variant = ((parseInt(h[16], 16) & 0x3) | 0x8).toString(16);
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-${variant}${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

export class LinearIssues {
  constructor(private readonly settings: LinearSettings) {}

  private async request<T>(query: string, variables: Record<string, unknown>): Promise<T> {
    const key = this.settings.apiKey;
    const res = await fetch(this.settings.apiUrl, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: key.startsWith('lin_api_') ? key : `Bearer ${key}`,
      },
      body: JSON.stringify({ query, variables }),
      signal: AbortSignal.timeout(15_000),
    });
    const body = (await res.json().catch(() => ({}))) as {
      data?: T;
      errors?: { message: string; extensions?: { type?: string } }[];
    };
    if (!res.ok || body.errors?.length || !body.data) {
      const first = body.errors?.[0];
      throw new LinearError(
        `Linear answered ${res.status}: ${first?.message ?? res.statusText}`,
        res.status,
        first?.extensions?.type,
      );
    }
    return body.data;
  }

  /** Posts `body` on the issue unless the comment keyed `key` is there already; its id either way. */
  async commentOnce(issue: string, key: string, body: string): Promise<{ id: string; created: boolean }> {
    const id = stableUuid(key);
    const found = await this.request<{ issue: { comments: { nodes: { id: string }[] } } }>(COMMENT_IDS, { id: issue });
    if (found.issue.comments.nodes.some((c) => c.id === id)) return { id, created: false };
    await this.request(CREATE_COMMENT, { input: { id, issueId: issue, body } });
    return { id, created: true };
  }
}
