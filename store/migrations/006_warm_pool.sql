-- The warm pool (docs/operations.md, "Sizing the warm pool"): per registered
-- repo, how many idle sandboxes each host keeps provisioned from its newest
-- snapshot, and those sandboxes. A session claims one with
-- `update ... where claimed_by is null returning`, so two sessions racing for
-- the last one cannot both get it.
alter table snapshot_repos add column pool integer not null default 0 check (pool between 0 and 16);
create table pool_sandboxes (
  -- the container's name (its storage and egress folder are keyed by it; a claim keeps it)
  name text primary key,
  repo text not null,
  host text not null,
  -- the snapshot image it was started from: only the host's newest is handed out
  image text not null,
  -- the sandbox limits it was created with ({cpus, memoryBytes, pids, tmpBytes, diskBytes})
  limits jsonb not null,
  created_at timestamptz not null default now(),
  claimed_by text,
  claimed_at timestamptz,
  -- a claimed sandbox's expiry: its session's (the container's label keeps the pool's)
  expires_at timestamptz
);
create index pool_sandboxes_free on pool_sandboxes (repo, host, image) where claimed_by is null;
create index pool_sandboxes_claimed on pool_sandboxes (claimed_by);
