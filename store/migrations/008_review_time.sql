-- Review minutes, measured (docs/audit.md): the time each reviewer spent on each
-- change, in the console (visible and in use) or from the CLI (view to decision).
create table review_time (
  session_id text not null,
  -- the change's hash (as an approval binds to it)
  change text not null,
  reviewer text not null,
  via text not null check (via in ('console', 'cli')),
  -- the first view; the total never exceeds the time since then
  first_at timestamptz not null,
  last_at timestamptz not null,
  active_ms bigint not null default 0,
  primary key (session_id, change, reviewer, via)
);

-- One meaning per word: the time a change waited for a decision is not review time.
alter table session_metrics rename column review_ms to review_wait_ms;
-- Measured review time of every reviewer of the session; null when none was measured.
alter table session_metrics add column review_active_ms bigint;
-- Decisions made without a measurement (a signal, the API without a view).
alter table session_metrics add column decisions_unmeasured integer not null default 0;
