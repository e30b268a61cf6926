/**
 * A jest reporter: a START line as each test file begins (npm test tells from it
 * what a lane was running when it stopped), and at the end of a run the test
 * files that took longest, with their time and outcome, and the run's wall time:
 * where a slow CI run spent its minutes (`count` sets how many, default 12).
 */
import path from 'node:path';

class ProgressReporter {
  constructor(globalConfig, options = {}) {
    this.root = globalConfig.rootDir;
    this.count = options.count ?? 12;
  }

  onTestFileStart(test) {
    const name = test.context.config.displayName?.name;
    process.stderr.write(`START ${name ? `${name} ` : ''}${path.relative(this.root, test.path)}\n`);
  }

  onRunComplete(_contexts, results) {
    const files = results.testResults
      .map((r) => ({
        file: path.relative(this.root, r.testFilePath),
        seconds: (r.perfStats.end - r.perfStats.start) / 1000,
        failed: r.numFailingTests > 0 || Boolean(r.testExecError),
      }))
      .sort((a, b) => b.seconds - a.seconds);
    if (files.length < 2) return;
    const total = files.reduce((sum, f) => sum + f.seconds, 0);
    const rows = files
      .slice(0, this.count)
      .map((f) => `  ${f.seconds.toFixed(1).padStart(7)} s  ${f.failed ? 'FAIL' : 'pass'}  ${f.file}`);
    const wall = ((Date.now() - results.startTime) / 1000).toFixed(0);
    process.stderr.write(
      `\nslowest test files (${files.length} files, ${total.toFixed(0)} s in files, ${wall} s wall):\n${rows.join('\n')}\n`,
    );
  }
}

export default ProgressReporter;
