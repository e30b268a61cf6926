-- Personal tokens (identity/personal-tokens.ts): a person's console sign-in and
-- CLI tokens, issued after an OpenID Connect sign-in or by the operator
-- (`drydock token issue`). Only the SHA-256 of a token is kept.
create table personal_tokens (
  -- the token's public id (its first characters), for listing and revoking
  id text primary key,
  person text not null,
  hash bytea not null unique,
  -- console: the browser's sign-in cookie; cli: `drydock login`
  purpose text not null check (purpose in ('console', 'cli')),
  created_at timestamptz not null default now(),
  expires_at timestamptz not null,
  revoked_at timestamptz
);
create index personal_tokens_person on personal_tokens (person);
