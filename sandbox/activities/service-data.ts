/**
 * A session's services' data in its checkpoint (docs/services.md, "Its data
 * in the checkpoint"): after the working tree's checkpoint, each service's
 * copy (ServiceRuntime.saveData) is kept beside it in Postgres, and a
 * replacement sandbox's services start from those copies instead of the
 * snapshot's data. Nothing of it goes through the workflow's history.
 */
import type { Logger } from 'pino';
import type { ServiceContainerSpec } from '../provider';
import type { Redactor } from '../../platform/scrub';
import { lastLines } from '../service-logs';
import { plainLogText } from '../../platform/scrub';
import type { SandboxDeps } from './deps';

/** The most a service's compressed copy may hold; a larger one is not kept (the replacement starts from the snapshot's data). */
export const SERVICE_DATA_BYTES = 64 * 1024 ** 2;

/** Where the copies go and come from; with the artifact store, where the console reads the services' logs. */
export type ServiceDataDeps = Pick<SandboxDeps, 'sandboxes' | 'checkpoints'> &
  Partial<Pick<SandboxDeps, 'artifacts'>> & { log?: Pick<Logger, 'warn'>; redactor?: Redactor };

/** Lines of each service's log the console shows (its artifact `services/<name>.log`). */
export const SERVICE_LOG_LINES = 300;

/**
 * Keeps each of the sandbox's services' data as the session's checkpoint at
 * `at.step` (only what changed since the kept copy). A copy that cannot be
 * taken (too large, the service's folders gone) drops the kept one, so a
 * replacement never pairs an older database with a newer tree; a failure of
 * the store itself is thrown, as the tree's checkpoint's is.
 */
export async function keepServiceData(
  deps: ServiceDataDeps,
  at: { sandbox: string; sessionId: string; step: string },
): Promise<void> {
  const runtime = deps.sandboxes.services;
  if (!runtime?.saveData) return;
  const services = await runtime.list(at.sandbox);
  if (!services.length) return;
  await publishServiceLogs(deps, at, services);
  const kept = await deps.checkpoints.serviceFingerprints(at.sessionId);
  for (const service of services) {
    const since = kept.get(service);
    const copy = await runtime
      .saveData(at.sandbox, service, { since, maxBytes: SERVICE_DATA_BYTES })
      .catch((err: unknown) => {
        deps.log?.warn({ sessionId: at.sessionId, service, err: String(err) }, 'service data not kept');
        return null;
      });
    if (copy === null && since !== undefined) await deps.checkpoints.removeService(at.sessionId, service);
    if (!copy) continue;
    await deps.checkpoints.saveService({
      sessionId: at.sessionId,
      service,
      step: at.step,
      lowers: copy.lowers,
      fingerprint: copy.fingerprint,
      data: copy.tar,
    });
  }
}

/**
 * Puts the session's kept copies back for a replacement's services, before
 * they start; returns the services restored, with the step each was taken
 * at. A copy over another snapshot's data is left out (that service starts
 * from its snapshot's data).
 */
export async function restoreServiceData(
  deps: Pick<SandboxDeps, 'sandboxes' | 'checkpoints'>,
  sessionId: string,
  containers: ServiceContainerSpec[],
): Promise<{ service: string; step: string; bytes: number }[]> {
  const runtime = deps.sandboxes.services;
  if (!runtime?.restoreData || !containers.some((c) => c.folders.length)) return [];
  const copies = new Map((await deps.checkpoints.services(sessionId)).map((c) => [c.service, c]));
  const restored: { service: string; step: string; bytes: number }[] = [];
  for (const spec of containers) {
    const copy = copies.get(spec.service);
    if (!copy || !(await runtime.restoreData(spec, { lowers: copy.lowers, tar: copy.data }))) continue;
    restored.push({ service: spec.service, step: copy.step, bytes: copy.data.length });
  }
  return restored;
}

/**
 * Each service's log's last lines, plain text and redacted, as the artifact
 * `services/<name>.log`, replaced at every checkpoint: what the console's
 * session page shows (the console's server may be on no sandbox host).
 */
async function publishServiceLogs(
  deps: ServiceDataDeps,
  at: { sandbox: string; sessionId: string },
  services: string[],
): Promise<void> {
  const { artifacts } = deps;
  const runtime = deps.sandboxes.services;
  if (!artifacts || !runtime) return;
  for (const service of services) {
    const raw = await runtime.log(at.sandbox, service, SERVICE_LOG_LINES).catch(() => undefined);
    if (raw === undefined) continue;
    const text = lastLines(plainLogText(raw), SERVICE_LOG_LINES);
    await artifacts.put(at.sessionId, `services/${service}.log`, deps.redactor ? deps.redactor.text(text) : text);
  }
}
