-- What a snapshot build read of the repo's environment that may not be what its
-- developers meant (`remoteUser: root` run as the sandbox user, a `${localEnv:…}`
-- that is empty here, a compose bind of a path the repo lacks…): shown where the
-- operator looks (`drydock snapshot build|list`, `repo list`), not only the worker's log.
alter table snapshot_builds add column if not exists notes jsonb;
