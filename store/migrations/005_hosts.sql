-- The Docker hosts that run workers (docs/operations.md, "Snapshots on each
-- host"): each host refreshes each registered repo's snapshot on a schedule
-- of its own (drydock-snapshot-<repo>@<host>), so a new snapshot reaches
-- every host. A worker records its host at start and at every reaper run.
create table hosts (
  id text primary key,
  -- the host's task queue, <queue>@<host id>: where its builds run
  queue text not null,
  seen_at timestamptz not null default now()
);
