-- The newest diff checkpoint of each session (docs/architecture.md, "Checkpoints"):
-- the working tree against the session's base commit, taken after every agent step.
-- In Postgres, not on a host's disk, so a session whose host is lost goes on elsewhere.
create table sandbox_checkpoints (
  session_id text primary key,
  -- the step whose end it records ("step-2", "tool-3-0", "commit"...)
  step text not null,
  base_commit text not null,
  -- `git diff --binary <base>` of the whole tree (untracked files included)
  diff bytea not null,
  taken_at timestamptz not null default now()
);
