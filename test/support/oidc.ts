/** Runs the local OpenID provider (oidc-provider.mjs) in a child process, until `close`. */
import { spawn } from 'node:child_process';
import path from 'node:path';

export interface LocalProvider {
  issuer: string;
  close(): Promise<void>;
}

export async function startOidcProvider(opts: {
  port: number;
  clientId: string;
  clientSecret: string;
  redirectUri: string;
  accounts: Record<string, { email: string; email_verified?: boolean; name?: string }>;
}): Promise<LocalProvider> {
  const child = spawn(
    process.execPath,
    [path.join(__dirname, 'oidc-provider.mjs'), String(opts.port), opts.clientId, opts.clientSecret, opts.redirectUri],
    {
      env: { ...process.env, OIDC_ACCOUNTS: JSON.stringify(opts.accounts), NODE_ENV: 'test' },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let output = '';
  const issuer = await new Promise<string>((resolve, reject) => {
    const read = (c: Buffer) => {
      output += c.toString();
      const ready = /ready (\S+)/.exec(output);
      if (ready) resolve(ready[1]);
    };
    child.stdout.on('data', read);
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    child.once('exit', (code) => reject(new Error(`the OIDC provider exited with ${code}: ${output}`)));
  });
  return {
    issuer,
    close: async () => {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
