/**
 * The Kubernetes client's errors in one line. Its ApiException's message is
 * a dump of the status code, the body and every response header over several
 * lines ("HTTP-Code: 404 Message: Unknown API Status Code! Body: …"), which
 * is what reached a person before; here it becomes the API's own message
 * with its status, and the code stays on the error for the callers that
 * branch on it (409: a retry's pod exists already).
 */

/** An API call refused, in one line; `code` is the HTTP status. */
export class KubernetesApiError extends Error {
  constructor(
    message: string,
    /** The HTTP status (404, 409, 403, ...). */
    readonly code: number,
    /** The Status's reason (NotFound, AlreadyExists, Forbidden, ...), when the API gave one. */
    readonly reason?: string,
  ) {
    super(message);
    this.name = 'KubernetesApiError';
  }
}

interface ApiStatus {
  message?: string;
  reason?: string;
}

/** The API's Status object in an ApiException's body: a parsed object, or the JSON text of one. */
function statusOf(body: unknown): ApiStatus | undefined {
  if (typeof body === 'object' && body !== null) return body as ApiStatus;
  if (typeof body !== 'string') return undefined;
  try {
    const parsed: unknown = JSON.parse(body);
    return typeof parsed === 'object' && parsed !== null ? (parsed as ApiStatus) : { message: body };
  } catch {
    return { message: body };
  }
}

/** One line, at most `max` characters, whitespace runs as one space. */
function oneLine(text: string, max = 300): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/**
 * The client's error as one line: an ApiException becomes "Kubernetes API
 * 404 NotFound: namespaces "x" not found" (never its headers); any other
 * error (a connection refused, a bad certificate) its first line.
 */
export function kubeErrorLine(err: unknown): string {
  const e = err as { code?: unknown; body?: unknown; message?: unknown };
  if (typeof e?.code === 'number' && 'body' in (e as object)) {
    const status = statusOf(e.body);
    const said = status?.message ? `: ${status.message}` : '';
    return oneLine(`Kubernetes API ${e.code}${status?.reason ? ` ${status.reason}` : ''}${said}`);
  }
  const message = typeof e?.message === 'string' ? e.message : String(err);
  return oneLine(message.split('\n')[0]);
}

/** The client's error as a KubernetesApiError (its code kept), or as it was when it is not the API's. */
export function toKubernetesError(err: unknown): unknown {
  const e = err as { code?: unknown; body?: unknown };
  if (typeof e?.code !== 'number' || !('body' in (e as object))) return err;
  const reason = statusOf(e.body)?.reason;
  return new KubernetesApiError(kubeErrorLine(err), e.code, reason);
}

/**
 * An API client whose calls reject with one-line errors (toKubernetesError),
 * so no raw dump leaves the provider: wrap each client once where it is made.
 */
export function withOneLineErrors<T extends object>(api: T): T {
  return new Proxy(api, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        const result: unknown = value.apply(target, args);
        if (!(result instanceof Promise)) return result;
        return result.catch((err: unknown) => {
          throw toKubernetesError(err);
        });
      };
    },
  });
}
