-- The audit trail: append-only, one hash chain per session (docs/audit.md).
create table audit_events (
  id bigserial primary key,
  session_id text not null,
  -- position in the session's chain, from 1
  seq integer not null,
  -- idempotency key (session, step, event): a retried activity writes its event once
  event_key text not null unique,
  kind text not null,
  at timestamptz not null,
  -- who: a person (approvals), the agent, or the worker acting for the session
  actor text not null,
  -- where: the worker's host id
  host text not null,
  activity_id text,
  attempt integer,
  data jsonb not null,
  prev_hash text not null,
  hash text not null,
  unique (session_id, seq)
);

create function audit_events_append_only() returns trigger language plpgsql as $$
begin
  raise exception 'audit_events is append-only: % refused', tg_op;
end
$$;
create trigger audit_events_no_change before update or delete on audit_events
  for each row execute function audit_events_append_only();
create trigger audit_events_no_truncate before truncate on audit_events
  for each statement execute function audit_events_append_only();

-- Pilot metrics: one row per session, written when it ends; `merged` later, from the pull_request webhook.
create table session_metrics (
  session_id text primary key,
  repo text not null,
  requested_by text,
  started_at timestamptz not null,
  ended_at timestamptz not null,
  outcome text not null,
  -- why a session did not complete: the error type or phase (null when completed)
  failure_cause text,
  time_to_ready_ms bigint,
  sandbox_ms bigint,
  snapshot_age_ms bigint,
  agent_turns integer not null default 0,
  tokens bigint not null default 0,
  cost_usd numeric(12, 6) not null default 0,
  verification_rounds integer not null default 0,
  verification_passed boolean,
  retries integer not null default 0,
  -- time the session waited on reviewers (all approval gates)
  review_ms bigint not null default 0,
  approved boolean not null default false,
  pr_url text,
  merged boolean,
  merged_at timestamptz
);
create index session_metrics_started on session_metrics (started_at);
create index session_metrics_pr on session_metrics (pr_url);
