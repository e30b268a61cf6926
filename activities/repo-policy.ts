/**
 * A session's settings under its repo's configuration: the operator's limits
 * from the registry and the repo's own `.drydock/config.yaml`, applied to the
 * session input by the pure rules of workflows/rules/repo-rules.ts.
 *
 * Read once at session start, from the worker's mirror at the session's ref,
 * not later from the sandbox: the limits decide how the container is made
 * (CPUs, memory, pids) and what the egress proxy allows, and a refused
 * configuration must fail the session before any sandbox exists. The result
 * is in the workflow history, so a retry or replay sees the same settings.
 * The server's approval policy comes with it, fixed in the history the same way.
 */
import { isIP } from 'node:net';
import { restrictedAddress, declaredEnvironment } from '../sandbox';
import { readRepoConfig } from '../repos/config-file';
import type { ApprovalPolicy } from '../workflows/api';
import { parseSessionInput, type SessionInput } from '../workflows/input';
import { DEV_MODE_LIMITS, type RepoConfig, type RepoGrant } from '../workflows/repo-config';
import { settleSessionInput } from '../workflows/rules/repo-rules';
import { repoApp } from '../workflows/services';
import { readAtCommit } from '../repos/git';
import { redactUrl } from '../workflows/rules/repo-url';
import type { OperatorEnvironment } from '../workflows/rules/environment-choice';
import type { McpServer } from '../workflows/mcp-servers';
import { notRegistered, resolveRef, syncMirror, type MirrorDeps } from '../repos/mirror';
import { RepoNotes } from '../repos/notes';
import type { Database } from '../store/db';
import type { GivenNote } from '../workflows/rules/repo-notes';

export type RepoPolicy =
  | {
      ok: true;
      /** The session input with the repo file's defaults, within the operator's limits. */
      input: SessionInput;
      /** The registered name ("owner/name"), or the URL of an unregistered repo in development mode. */
      repo: string;
      /** The operator's approvers of the repo (empty: the server's). */
      approvers: string[];
      /** The server's approval policy (the worker's configuration), which the session can only tighten. */
      serverPolicy: ApprovalPolicy;
      /** The repo file's environment, recorded (images are not built from it yet). */
      environment?: RepoConfig['environment'];
      /** The commit the session's ref names now (the repo file was read there): the session starts from it. */
      commit?: string;
      /** The operator's MCP servers of the repo (docs/mcp.md): header values stay on the worker. */
      mcp?: McpServer[];
      /** The repo's approved notes (repo memory), within their bound; none when the input's memory.use is false. */
      notes?: GivenNote[];
    }
  | { ok: false; problems: string[] };

/** What settling a session's input uses: the mirrors and registry, and the server's approval policy (sessions can only tighten it). */
export interface RepoPolicyDeps extends MirrorDeps {
  policy: ApprovalPolicy;
  /** Where the repo's approved notes are (repos/notes.ts); without it sessions get none. */
  db?: Pick<Database, 'pool'>;
}

export function createRepoPolicyActivities(deps: RepoPolicyDeps) {
  return {
    /** The session input settled against its repo's configuration, or the problems that refuse it. */
    async repoPolicy(raw: unknown): Promise<RepoPolicy> {
      const parsed = parseSessionInput(raw);
      if (!parsed.ok) return parsed;
      const { url, ref } = parsed.input.repo;
      const found = await deps.repos.byUrl(url);
      if (!found.ok && !deps.devMode) return { ok: false, problems: [notRegistered(url)] };
      const grant: RepoGrant = found.ok
        ? { name: found.repo.name, limits: found.repo.limits }
        : { name: redactUrl(url), limits: DEV_MODE_LIMITS };
      // The repo's notes are read while the mirror is fetched (kept only if the settled input uses them).
      const notesRead = deps.db ? new RepoNotes(deps.db.pool).given(grant.name) : Promise.resolve([]);
      notesRead.catch(() => undefined); // awaited below when used; unused, its failure does not matter
      // Checked against the registry above: the fetch need not ask it again.
      const mirror = await syncMirror(deps, url, { onStartPath: true });
      const commit = await resolveRef(mirror, ref);
      const file = await readRepoConfig(mirror, commit);
      if (!file.ok) return file;
      const operator = found.ok ? found.repo.environment : undefined;
      const app = repoApp(file.config?.app, await devcontainerOf(mirror, commit, file.config, operator));
      const settled = settleSessionInput({ grant, file: file.config, raw, restricted: restrictedHost, app });
      if (!settled.ok) return settled;
      const notes = settled.input.memory.use ? await notesRead : [];
      return {
        ...settled,
        repo: grant.name,
        approvers: grant.limits.approvers,
        serverPolicy: deps.policy,
        commit,
        ...(found.ok && found.repo.mcp?.length ? { mcp: found.repo.mcp } : {}),
        ...(file.config?.environment ? { environment: file.config.environment } : {}),
        ...(notes.length ? { notes } : {}),
      };
    },
  };
}

/** The repo's chosen environment at `commit` (for its dev container's app); a problem with it is provisioning's to report. */
async function devcontainerOf(
  mirror: string,
  commit: string,
  config: RepoConfig | undefined,
  operator: OperatorEnvironment | undefined,
) {
  const read = (file: string) =>
    readAtCommit(mirror, commit, ['cat-file', 'blob', `${commit}:${file}`]).catch(() => undefined);
  return declaredEnvironment(operator, config, read).catch(() => undefined);
}

/** A literal address only an operator's rule may name; host names are judged by the proxy when resolved. */
export function restrictedHost(host: string): string | undefined {
  return isIP(host) ? restrictedAddress(host) : undefined;
}
