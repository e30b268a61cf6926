-- The operator's MCP servers of a repo (docs/mcp.md): `drydock repo add --mcp <file>`.
-- A JSON array of declarations (mcp/declaration.ts); header values name worker
-- secrets (DRYDOCK_SECRET_<NAME>), never hold them.
alter table snapshot_repos add column if not exists mcp jsonb not null default '[]';
