/**
 * The CPU time this process spends on `work`. Complexity guards (a scrubber that
 * must stay linear on any input) measure the work done, not the wall time a
 * busy machine stretches: the suite must pass beside CPU burners (infra/load-check.sh).
 */
export async function cpuMs(work: () => unknown): Promise<number> {
  const before = process.cpuUsage();
  await work();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000;
}
