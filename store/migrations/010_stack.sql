-- Full-stack sandboxes (docs/services.md): the registries a repo's images may
-- be pulled from (`drydock repo add --allow-registry`), and what each snapshot
-- build ran: its setup command and where it came from (the operator, the repo
-- file, the dev container, the setup script, or inferred from a lockfile), and
-- its services with their images pinned by digest and their data images.
alter table snapshot_repos add column if not exists registries jsonb not null default '[]';
alter table snapshot_builds add column if not exists setup text;
alter table snapshot_builds add column if not exists setup_source text;
alter table snapshot_builds add column if not exists services jsonb;
