-- Repo memory (docs/agents.md, Repo memory): notes a session's agent proposed for its repo,
-- which a maintainer approves, edits or drops; approved notes are given to later sessions.
-- drydock never writes them into the repo.
create table repo_notes (
  id bigserial primary key,
  -- the registered name ("owner/name"), or a development-mode URL without credentials
  repo text not null,
  -- the session that proposed it
  session_id text not null,
  -- "<session>/<round>/<n>": a retried collection writes nothing new
  proposal_key text not null unique,
  status text not null check (status in ('proposed', 'approved', 'dropped')),
  -- the current version (repo_note_versions holds each)
  version integer not null default 1,
  text text not null,
  proposed_at timestamptz not null default now(),
  decided_by text,
  decided_at timestamptz
);
create index repo_notes_repo on repo_notes (repo, status, id);

-- Every version of a note: the proposal (version 1), then each approval, edit or drop.
create table repo_note_versions (
  note_id bigint not null references repo_notes (id),
  version integer not null,
  status text not null,
  text text not null,
  by text not null,
  at timestamptz not null default now(),
  primary key (note_id, version)
);
