/**
 * `drydock demo`: a small sample repo with a failing test and a web page, and
 * the session whose scripted agent fixes it, so a newcomer sees the whole tour:
 * agent, tests with a JUnit report, a browser check with screenshots, and the
 * approval in the review console.
 */
import { execFileSync } from 'node:child_process';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { SessionInputDraft } from '../workflows/input';

const FILES: Record<string, string> = {
  'README.md': '# demo-calculator\n\nA tiny app for the drydock demo. `node test.js` runs the tests.\n',
  'calc.js': `// The bug the demo's agent fixes: add() subtracts.
exports.add = (a, b) => a - b;
`,
  'test.js': `// Runs the tests and writes a JUnit report to reports/junit.xml.
const fs = require('node:fs');
const { add } = require('./calc');
const cases = [
  ['adds two numbers', () => add(2, 3) === 5],
  ['adds a negative number', () => add(5, -2) === 3],
  ['adding zero changes nothing', () => add(7, 0) === 7],
];
let failed = 0;
const xml = cases.map(([name, check]) => {
  const ok = check();
  if (!ok) failed++;
  console.log((ok ? 'ok   ' : 'FAIL ') + name);
  return '<testcase classname="calc" name="' + name + '">' + (ok ? '' : '<failure message="wrong sum"/>') + '</testcase>';
});
fs.mkdirSync('reports', { recursive: true });
fs.writeFileSync('reports/junit.xml', '<testsuite name="calc" tests="' + cases.length + '">' + xml.join('') + '</testsuite>');
process.exit(failed ? 1 : 0);
`,
  'server.js': `// The app's one page shows a sum; the browser check reads it.
const http = require('node:http');
const { add } = require('./calc');
http
  .createServer((req, res) => {
    res.writeHead(req.url === '/' ? 200 : 404, { 'content-type': 'text/html' });
    res.end('<!doctype html><title>calculator</title><h1 id="sum">2 + 3 = ' + add(2, 3) + '</h1>');
  })
  .listen(process.env.PORT || 3000, '127.0.0.1', () => console.log('calculator listening'));
`,
  '.gitignore': 'reports/\n',
};

function git(args: string[], cwd: string): void {
  execFileSync('git', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A bare repo (the demo's "remote") under `parent`, holding the sample app on main. */
export async function makeDemoRepo(parent: string): Promise<{ url: string; bare: string }> {
  await mkdir(parent, { recursive: true });
  const dir = await mkdtemp(path.join(parent, 'demo-'));
  const bare = path.join(dir, 'demo-calculator.git');
  const work = path.join(dir, 'work');
  await mkdir(work);
  git(['init', '--quiet', '--bare', '--initial-branch=main', bare], dir);
  git(['init', '--quiet', '--initial-branch=main'], work);
  for (const [name, content] of Object.entries(FILES)) await writeFile(path.join(work, name), content);
  git(['add', '.'], work);
  git(
    ['-c', 'user.name=drydock demo', '-c', 'user.email=demo@drydock.invalid', 'commit', '--quiet', '-m', 'calculator'],
    work,
  );
  git(['push', '--quiet', bare, 'main'], work);
  return { url: `file://${bare}`, bare };
}

/** The demo session: a scripted agent fixes add(), the tests and the page check pass, push waits for approval. */
export function demoInput(url: string, requestedBy: string): SessionInputDraft {
  return {
    repo: { url },
    task: 'Fix add() in calc.js: the tests say 2 + 3 is not -1',
    requestedBy,
    agent: { kind: 'script', steps: [{ run: "sed -i 's/a - b/a + b/' calc.js" }] },
    verify: {
      test: 'node test.js',
      junit: ['reports/junit.xml'],
      browser: {
        start: 'node server.js',
        url: 'http://localhost:3000/',
        readyTimeout: '30s',
        checks: [{ path: '/', expectText: '2 + 3 = 5' }],
      },
    },
    approval: { required: ['push'] },
  };
}
