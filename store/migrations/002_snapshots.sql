-- Snapshots: prepared images of registered repos (docs/architecture.md, "Snapshots").

-- A registered repo: how to prepare it and how often.
create table snapshot_repos (
  repo text primary key,
  -- shell command run in /workspace; null: `sh .drydock/setup.sh` from the repo
  setup text,
  -- branch the snapshot is built from; null: the remote's default branch
  ref text,
  every_ms bigint not null,
  keep integer not null check (keep >= 1),
  setup_timeout_ms bigint not null,
  -- egress rules of the setup step ({host, port?, methods?}): the package registries
  egress jsonb not null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

-- One row per build (the build history); the ready ones are the snapshot registry.
create table snapshot_builds (
  -- the refreshSnapshot workflow id: one build per workflow run
  id text primary key,
  repo text not null,
  -- the Docker host holding the image (images are per host)
  host text not null,
  status text not null check (status in ('building', 'ready', 'failed', 'removed')),
  commit_sha text,
  setup_hash text,
  image text,
  size_bytes bigint,
  started_at timestamptz not null,
  finished_at timestamptz,
  duration_ms bigint,
  -- why a build failed (the tail of the setup's output)
  error text,
  removed_at timestamptz
);
create index snapshot_builds_newest on snapshot_builds (repo, host, status, finished_at desc);
