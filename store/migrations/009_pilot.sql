-- The pilot (docs/pilot.md): what each session was (agent configuration, attempt), what
-- it measured besides the review (the acceptance command), and what went wrong on the way.
alter table session_metrics add column agent text;
-- the agentAttempts session whose attempt this was (null: a session on its own)
alter table session_metrics add column attempt_of text;
-- the acceptance command's verdict; null when the session had none or never got there
alter table session_metrics add column acceptance_passed boolean;
-- session start → its change shown at an approval gate
alter table session_metrics add column time_to_review_ms bigint;
-- sandboxes lost and replaced from the checkpoint
alter table session_metrics add column restarts integer not null default 0;
-- refusals: the egress proxy's (and the model gateway's), decisions refused, budgets that stopped the agent
alter table session_metrics add column refusals_egress integer not null default 0;
alter table session_metrics add column refusals_decisions integer not null default 0;
alter table session_metrics add column refusals_budget integer not null default 0;
alter table session_metrics add column pushed boolean not null default false;
create index session_metrics_merged on session_metrics (merged_at) where merged;

-- A pilot's sessions: which task, configuration and attempt each one is (written before it starts).
create table pilot_sessions (
  session_id text primary key,
  pilot text not null,
  task text not null,
  tags text[] not null default '{}',
  configuration text not null,
  attempt integer not null,
  -- the faults planned for it (what each did: the audit trail's `fault` rows)
  faults text[] not null default '{}',
  recorded_at timestamptz not null default now()
);
create index pilot_sessions_pilot on pilot_sessions (pilot);

-- A merged drydock change that was reverted, or whose lines a fix changed, within the window.
create table escaped_defects (
  session_id text not null,
  -- the reverting or fixing commit
  commit text not null,
  kind text not null check (kind in ('revert', 'fix')),
  committed_at timestamptz not null,
  found_at timestamptz not null default now(),
  summary text not null,
  primary key (session_id, commit)
);

-- How far each merged change has been searched for escaped defects.
create table defect_checks (
  session_id text primary key,
  checked_until timestamptz not null,
  window_ends timestamptz not null
);
