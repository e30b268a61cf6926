/**
 * How every drydock process (workers, `serve`, the CLI) reaches Temporal:
 * Temporal's standard client settings, read by `@temporalio/envconfig` from a
 * profile of the TOML config file (TEMPORAL_CONFIG_FILE, default
 * ~/.config/temporalio/temporal.toml; TEMPORAL_PROFILE picks one) and the
 * environment, which wins: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
 * TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH,
 * TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH,
 * TEMPORAL_TLS_SERVER_NAME, TEMPORAL_GRPC_META_<NAME>. The same settings
 * drive the `temporal` CLI.
 */
import { randomUUID } from 'node:crypto';
import { isIP } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  Client,
  Connection,
  defaultGrpcRetryOptions,
  makeGrpcRetryInterceptor,
  type ClientPlugin,
  type ConnectionOptions,
  type Metadata,
  type TLSConfig,
  type WorkflowClientInterceptor,
} from '@temporalio/client';
import { loadClientConfigProfile, toClientOptions } from '@temporalio/envconfig';
import type { NativeConnection } from '@temporalio/worker';

/** The variables this module reads (besides TEMPORAL_GRPC_META_<NAME>), for the deployment-file checks. */
export const TEMPORAL_VARIABLES = [
  'TEMPORAL_ADDRESS',
  'TEMPORAL_NAMESPACE',
  'TEMPORAL_API_KEY',
  'TEMPORAL_TLS',
  'TEMPORAL_TLS_CLIENT_CERT_PATH',
  'TEMPORAL_TLS_CLIENT_KEY_PATH',
  'TEMPORAL_TLS_SERVER_CA_CERT_PATH',
  'TEMPORAL_TLS_SERVER_NAME',
  'TEMPORAL_PROFILE',
  'TEMPORAL_CONFIG_FILE',
] as const;

export interface TemporalSettings {
  TEMPORAL_ADDRESS: string;
  TEMPORAL_NAMESPACE: string;
  /** TLS, API key and gRPC headers: how to authenticate at TEMPORAL_ADDRESS. */
  temporalAuth: TemporalAuth;
}

export interface TemporalAuth {
  /** true: TLS with the system's CAs; an object: its certificates (loaded at start); absent: plaintext. */
  tls?: TLSConfig | boolean;
  apiKey?: string;
  metadata?: Metadata;
}

/** Reads the profile and the environment once; a bad file or setting names it. */
export function loadTemporalSettings(env: NodeJS.ProcessEnv): TemporalSettings {
  const vars = Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined));
  let options;
  try {
    options = toClientOptions(loadClientConfigProfile({ overrideEnvVars: vars }));
  } catch (err) {
    const where = env.TEMPORAL_PROFILE ? `profile ${env.TEMPORAL_PROFILE}` : 'Temporal connection settings';
    throw new Error(`${where}: ${(err as Error).message}`);
  }
  const { address, apiKey, tls, metadata } = options.connectionOptions;
  for (const [name, value] of [
    ['TEMPORAL_ADDRESS', address],
    ['TEMPORAL_NAMESPACE', options.namespace],
  ] as const) {
    if (value !== undefined && !/^\S{1,255}$/.test(value)) {
      throw new Error(`${name}: one word of at most 255 characters, not "${value.slice(0, 40)}"`);
    }
  }
  return {
    TEMPORAL_ADDRESS: address ?? 'localhost:7233',
    TEMPORAL_NAMESPACE: options.namespace ?? 'default',
    temporalAuth: {
      ...(tls !== undefined && tls !== null ? { tls } : {}),
      ...(apiKey ? { apiKey } : {}),
      ...(metadata && Object.keys(metadata).length ? { metadata } : {}),
    },
  };
}

type Settings = Pick<TemporalSettings, 'TEMPORAL_ADDRESS' | 'TEMPORAL_NAMESPACE' | 'temporalAuth'>;

const optionsOf = (settings: Settings) => ({ address: settings.TEMPORAL_ADDRESS, ...settings.temporalAuth });

/** A client connection (workflow clients, operator calls); fails with one line if Temporal refuses it. */
export async function connectTemporal(settings: Settings): Promise<Connection> {
  try {
    return await ClosableConnection.open({ ...optionsOf(settings), connectTimeout: '5s' });
  } catch (err) {
    throw await failure(settings, err);
  }
}

/**
 * The SDK's retry of failed calls, but none once closed. The SDK decides on a retry when a call
 * fails and starts it from a timer (up to 5 s later) that nothing clears; a retry that starts on a
 * closed channel throws "Channel has been shut down" out of that timer and takes the process down
 * (in jest: whichever test file runs then). So `close()` says no to further retries and waits
 * until the retries already timed have started, while the channel is still open.
 */
export class RetryUntilClosed {
  private closed = false;
  private timedUntil = 0;

  readonly interceptor: ReturnType<typeof makeGrpcRetryInterceptor> = (() => {
    const retry = defaultGrpcRetryOptions();
    return makeGrpcRetryInterceptor({
      retryableDecider: (attempt, status) => !this.closed && retry.retryableDecider(attempt, status),
      delayFunction: (attempt, status) => {
        const ms = retry.delayFunction(attempt, status);
        this.timedUntil = Math.max(this.timedUntil, Date.now() + ms);
        return ms;
      },
    });
  })();

  /** Call before closing the connection. */
  async close(): Promise<void> {
    this.closed = true;
    const wait = this.timedUntil - Date.now();
    if (wait > 0) await sleep(wait + 50);
  }
}

/** A connection whose close() first lets the retries already timed start (see RetryUntilClosed). */
class ClosableConnection extends Connection {
  private retry!: RetryUntilClosed; // set by open()

  static async open(options: ConnectionOptions): Promise<ClosableConnection> {
    const retry = new RetryUntilClosed();
    const connection = ClosableConnection.lazy({ ...options, interceptors: [retry.interceptor] }) as ClosableConnection;
    connection.retry = retry;
    try {
      await connection.ensureConnected();
    } catch (err) {
      await connection.close(); // its channel would live on, trying to connect
      throw err;
    }
    return connection;
  }

  override async close(): Promise<void> {
    await this.retry.close();
    await super.close();
  }
}

/** A client on TEMPORAL_NAMESPACE. */
export async function connectClient(settings: Settings, plugins: ClientPlugin[] = []): Promise<Client> {
  return new Client({
    connection: await connectTemporal(settings),
    namespace: settings.TEMPORAL_NAMESPACE,
    plugins,
    interceptors: { workflow: [retryAbortedUpdates()] },
  });
}

/** gRPC's status code for "the system is not in a state required for the operation". */
const FAILED_PRECONDITION = 9;

/**
 * An update the server aborted because the workflow task that carried it failed or timed out
 * (a busy worker: "unexpected workflow task failure") was never applied: it is sent again,
 * with the same update id (applied once however often it arrives), for the next workflow task
 * to take; at most `attempts` times, `pauseMs` × the attempt apart.
 */
export function retryAbortedUpdates(attempts = 5, pauseMs = 1_000): WorkflowClientInterceptor {
  return {
    async startUpdate(input, next) {
      // The client makes an id per call when none is set: one id for every try, so the server applies it once.
      const once = { ...input, options: { ...input.options, updateId: input.options?.updateId ?? randomUUID() } };
      for (let attempt = 1; ; attempt++) {
        try {
          return await next(once);
        } catch (err) {
          if (attempt >= attempts || !abortedWithItsTask(err)) throw err;
          await sleep(pauseMs * attempt);
        }
      }
    },
  };
}

function abortedWithItsTask(err: unknown): boolean {
  const cause = (err as { cause?: { code?: unknown; message?: unknown } } | undefined)?.cause;
  return cause?.code === FAILED_PRECONDITION && /workflow task failure/i.test(String(cause.message));
}

/** The worker's connection; fails with one line if Temporal refuses it. */
export async function connectWorker(settings: Settings): Promise<NativeConnection> {
  // Loaded here, not with the module: the SDK's worker half is a fifth of a CLI start that needs no worker.
  const { NativeConnection } = await import('@temporalio/worker');
  try {
    return await NativeConnection.connect(optionsOf(settings));
  } catch (err) {
    throw await failure(settings, err);
  }
}

/** Could not reach or authenticate at Temporal: one line that says which and what to check. */
export class TemporalConnectionError extends Error {
  constructor(address: string, reason: string, cause: unknown) {
    super(`cannot connect to Temporal at ${address}: ${reason}`, { cause });
    this.name = 'TemporalConnectionError';
  }
}

async function failure(settings: Settings, err: unknown): Promise<TemporalConnectionError> {
  const reason =
    (await diagnoseTls(settings).catch(() => undefined)) ?? firstLine(String((err as Error)?.message ?? err));
  return new TemporalConnectionError(settings.TEMPORAL_ADDRESS, reason, err);
}

const firstLine = (text: string) => text.split('\n')[0].trim().slice(0, 300);

const CLIENT_CERT = 'TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH';
const SERVER_CA = 'TEMPORAL_TLS_SERVER_CA_CERT_PATH (and TEMPORAL_TLS_SERVER_NAME if its name differs)';

/**
 * The SDKs report a refused handshake as a deadline or a closed stream; a
 * TLS handshake of our own with the same certificates (and the HTTP/2 preface,
 * after which a TLS 1.3 server judges the client certificate) names the cause.
 */
function diagnoseTls(settings: Settings): Promise<string | undefined> {
  const tlsSetting = settings.temporalAuth.tls;
  const opts = typeof tlsSetting === 'object' ? tlsSetting : {};
  const i = settings.TEMPORAL_ADDRESS.lastIndexOf(':');
  const host = settings.TEMPORAL_ADDRESS.slice(0, i);
  const servername = opts.serverNameOverride ?? (isIP(host) ? undefined : host);
  const pair = opts.clientCertPair;
  return new Promise((resolve) => {
    const socket = tlsConnect({
      host,
      port: Number(settings.TEMPORAL_ADDRESS.slice(i + 1)),
      ...(servername ? { servername } : {}),
      ALPNProtocols: ['h2'],
      ...(opts.serverRootCACertificate ? { ca: Buffer.from(opts.serverRootCACertificate) } : {}),
      ...(pair ? { cert: Buffer.from(pair.crt), key: Buffer.from(pair.key) } : {}),
      // Without TLS configured, only: does the server speak TLS?
      rejectUnauthorized: !!tlsSetting,
      timeout: 3_000,
    });
    const done = (reason: string | undefined) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(reason);
    };
    let timer: NodeJS.Timeout | undefined;
    socket.once('secureConnect', () => {
      if (!tlsSetting) return done('the server speaks TLS: set TEMPORAL_TLS=true, or ' + SERVER_CA);
      socket.write('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
      timer = setTimeout(() => done(undefined), 500);
    });
    socket.on('data', () => undefined);
    socket.once('timeout', () => done(undefined));
    socket.once('error', (err: NodeJS.ErrnoException) => done(tlsReason(err, !!tlsSetting, !!pair)));
  });
}

function tlsReason(err: NodeJS.ErrnoException, tls: boolean, hasCert: boolean): string | undefined {
  const code = err.code ?? '';
  if (/ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ETIMEDOUT/.test(code)) return `nothing answers (${code})`;
  if (!tls) return undefined;
  if (code === 'ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED' || (!hasCert && /ALERT_HANDSHAKE_FAILURE/.test(code))) {
    return `the server requires a client certificate (mTLS): set ${CLIENT_CERT}`;
  }
  if (
    /ALERT_(UNKNOWN_CA|BAD_CERTIFICATE|CERTIFICATE_UNKNOWN|CERTIFICATE_EXPIRED|UNSUPPORTED_CERTIFICATE|ACCESS_DENIED)/.test(
      code,
    )
  ) {
    return `the server refused the client certificate of TEMPORAL_TLS_CLIENT_CERT_PATH (${
      err.message
        .split(':')
        .find((p) => /alert/.test(p))
        ?.trim() ?? code
    })`;
  }
  if (/CERT|SIGNATURE|ISSUER|ALTNAME/.test(code)) {
    return `the server's certificate is not trusted (${err.message}): set ${SERVER_CA}`;
  }
  if (/WRONG_VERSION_NUMBER|PACKET_LENGTH_TOO_LONG|ECONNRESET/.test(code)) {
    return 'the server does not speak TLS: unset TEMPORAL_TLS and the TEMPORAL_TLS_* paths';
  }
  return undefined;
}
