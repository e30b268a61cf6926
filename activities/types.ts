// Temporary: replaced by the split of activities/sandbox.ts.
export type { CommitResult, Sandbox, SetupPlan, StepInput, StepResult } from './sandbox';
