/** When a person may have the repo's app started for its preview (startPreview): pure, unit-tested without Temporal. */
import type { AttachInput, Phase } from '../api';

/** Phases where the sandbox idles with the change in it: the app may run beside it for people to look at. */
const PREVIEWABLE: readonly Phase[] = ['awaiting_approval', 'attached'];

export interface PreviewState {
  phase: Phase;
  sandbox?: { preview?: unknown };
  parked?: unknown;
}

/** Whether the app may be started for its preview now; the reason when not. */
export function checkPreview(
  state: PreviewState,
  input: AttachInput | undefined,
): { ok: true } | { ok: false; reason: string } {
  const refuse = (reason: string) => ({ ok: false, reason }) as const;
  if (!input || typeof input.by !== 'string' || input.by.trim() === '' || input.by.length > 200) {
    return refuse('startPreview needs {by}: who asks, at most 200 characters');
  }
  if (!state.sandbox) return refuse(`the session has no sandbox in phase ${state.phase}`);
  if (!state.sandbox.preview)
    return refuse("the repo declares no app (an `app:` block, or a dev container's forwarded port)");
  if (state.parked) {
    return refuse(
      'the sandbox is parked (torn down while the session waits): attach or send a follow-up to bring it back',
    );
  }
  if (!PREVIEWABLE.includes(state.phase)) {
    return refuse(
      `the app is started for a preview only while the session waits at its gate (phase ${state.phase}): ` +
        'the agent and the checks run it their own way',
    );
  }
  return { ok: true };
}
