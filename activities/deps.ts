/**
 * What every activity needs from the worker process: the sandbox's (SandboxDeps)
 * and what only the activities outside the sandbox use. Tests hand in real or local ones.
 */
import type { ApprovalPolicy } from '../workflows/api';
import type { ModelSettings } from '../models/llm';
import type { SandboxDeps } from '../sandbox/activities/deps';
import type { LinearSettings } from '../linear/client';
import type { SlackSettings } from '../slack/client';

export interface ActivityDeps extends SandboxDeps {
  /** The server's approval policy (sessions can only tighten it). */
  policy: ApprovalPolicy;
  /** Model endpoints, keys and prices of the built-in agent loop (keys never leave the worker). */
  models: ModelSettings;
  /** Whether a push may go to the repository's default branch (DRYDOCK_ALLOW_DEFAULT_BRANCH_PUSH). @default false */
  allowDefaultBranchPush?: boolean;
  /** Worker-side command for the `deploy` action. */
  deployCommand?: string;
  /** Worker variables the deploy command gets besides the basic ones (DRYDOCK_DEPLOY_ENV). @default [] */
  deployEnvNames?: string[];
  /** Link to a session in the Temporal Web UI, for pull request bodies. */
  sessionLink: (sessionId: string) => string;
  /** Link to a session in the review console, for GitHub (default: sessionLink). */
  reviewLink?: (sessionId: string) => string;
  /** Slack's Web API and the bot token, for sessions started from Slack (absent: not configured). */
  slack?: SlackSettings;
  /** Linear's API and key, for sessions started from Linear (absent: not configured). */
  linear?: LinearSettings;
  /** The operator's limits of parallel attempts and pilots (default 4 each), and the credentials-rotation drill's command. */
  operator?: { maxAttempts: number; pilotConcurrency: number; rotateCommand?: string };
  /** How long after its merge a change is watched for escaped defects (ms). @default 14 days */
  defectWindowMs?: number;
  /** What Temporal knows of a session (a resumed pilot asks): not found, running in a phase, or closed; its parent. */
  sessionState?: (
    sessionId: string,
  ) => Promise<
    { state: 'missing' } | { state: 'running' | 'closed'; phase?: import('../workflows/api').Phase; parent?: string }
  >;
}
