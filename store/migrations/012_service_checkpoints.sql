-- Each session's services' data as its newest checkpoint keeps it (docs/services.md,
-- "Its data in the checkpoint" under "What a service is"): per service, a copy of what the session wrote into its
-- data folders since the snapshot, so a replacement sandbox's services start from it.
create table if not exists sandbox_service_checkpoints (
  session_id text not null,
  service text not null,
  -- the step whose end it was taken at
  step text not null,
  -- what the copy lies over (the service's folders and their images): another snapshot's is not used
  lowers text not null,
  -- equal for equal content: a checkpoint with nothing new copies nothing
  fingerprint text not null,
  -- the provider's copy (Docker: a gzipped tar of the overlays' upper layers)
  data bytea not null,
  taken_at timestamptz not null default now(),
  primary key (session_id, service)
);
