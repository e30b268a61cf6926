-- The operator decides a repo's environment (docs/snapshots.md, "Choosing the
-- environment"): `drydock repo add --environment devcontainer|dockerfile|base|image:<ref>`
-- (null: the repo's own choice) and `--ignore-devcontainer`.
alter table snapshot_repos add column if not exists environment text;
alter table snapshot_repos add column if not exists ignore_devcontainer boolean not null default false;
