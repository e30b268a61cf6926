-- A repo's own webhook secrets (docs/forges.md): `drydock repo add --webhook-secret <NAME>`.
-- A JSON array of secret names, current first; the values are serve's DRYDOCK_SECRET_<NAME>,
-- never stored here. A delivery naming the repo is checked against these only.
alter table snapshot_repos add column if not exists webhook_secrets jsonb not null default '[]';
