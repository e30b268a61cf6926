/** The nonce of one sandbox step, drawn deterministically in the workflow. */
import { uuid4 } from '@temporalio/workflow';

/**
 * A fresh nonce for one sandbox step (32 hex digits): it names the step's
 * run-once state in the sandbox. From the workflow's seeded random, so it is
 * the same on replay and in every retry of the activity, and no earlier step
 * in the sandbox can know it.
 */
export function stepNonce(): string {
  return uuid4().replace(/-/g, '');
}
