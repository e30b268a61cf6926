-- The repo registry (docs/configuration.md, "Repositories"): the one list of
-- repositories drydock works on. A registered repo is a row of snapshot_repos
-- (keyed by its URL); these columns add its name and the operator's limits.

-- "owner/name" as webhooks and the API name it; null: derived from the URL
alter table snapshot_repos add column name text;
create unique index snapshot_repos_name on snapshot_repos (lower(name));
-- names of worker secrets (DRYDOCK_SECRET_<NAME>) a session of this repo may be granted
alter table snapshot_repos add column secrets jsonb not null default '[]';
-- resource maxima of its sessions ({cpus, memory, pids, tmp, wallTime, disk}); absent: the schema's own
alter table snapshot_repos add column maxima jsonb not null default '{}';
-- who may approve its sessions' actions (within the server's approvers); empty: the server's list
alter table snapshot_repos add column approvers jsonb not null default '[]';
