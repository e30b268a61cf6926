/**
 * What the worker checks of a change before a reviewer sees it and before it
 * is pushed: how big its files are once inflated (a git bundle is
 * compressed: a 1 MB bundle can hold gigabytes, which `git diff --binary`
 * would load whole), and whether it holds the value of a secret the worker
 * knows. The reviewer sees the change byte for byte as it would be pushed,
 * so a secret in it is refused, never hidden.
 */
import { spawn } from 'node:child_process';
import { git } from './git';
import { runProcess } from '../platform/processes';
import { OutputOverCap, type OutputCap } from '../platform/output-cap';
import type { SecretFound } from '../workflows/rules/change-secrets';

/** A file the change adds or changes: its path, its blob and the blob's size in bytes (uncompressed). */
export interface ChangedFile {
  path: string;
  blob: string;
  size: number;
}

/** Modes of entries whose new side is a blob: files, executables, symlinks (a gitlink is another repo's commit). */
const BLOB_MODE = /^1[02]/;

/**
 * The files `commit` adds or changes against `parent`, with their sizes as
 * git records them in each object's header: nothing is inflated.
 */
export async function changedFiles(mirror: string, parent: string, commit: string): Promise<ChangedFile[]> {
  const raw = await git(['diff-tree', '-r', '-z', '--no-renames', '--no-commit-id', parent, commit], mirror);
  // ":<old mode> <new mode> <old id> <new id> <status>\0<path>\0", one per entry.
  const fields = raw.split('\0');
  const entries: { path: string; blob: string }[] = [];
  for (let i = 0; i + 1 < fields.length; i += 2) {
    const [, newMode, , blob, status] = fields[i].slice(1).split(' ');
    if (status !== 'D' && BLOB_MODE.test(newMode)) entries.push({ path: fields[i + 1], blob });
  }
  if (entries.length === 0) return [];
  // Through the process helper (a line per file): no fork of the worker itself.
  const { stdout } = await runProcess('git', ['cat-file', '--batch-check=%(objectname) %(objectsize)'], {
    cwd: mirror,
    input: entries.map((e) => `${e.blob}\n`).join(''),
  });
  const sizeOf = new Map(
    stdout
      .trim()
      .split('\n')
      .map((line) => line.split(' ') as [string, string]),
  );
  return entries.map((e) => ({ ...e, size: Number(sizeOf.get(e.blob)) }));
}

/** Refuses a change whose files, inflated, are over `cap` together (before anything reads them whole). */
export function checkChangeSize(files: ChangedFile[], cap: OutputCap): void {
  const total = files.reduce((sum, f) => sum + f.size, 0);
  if (total > cap.bytes) throw new OutputOverCap(cap);
}

/**
 * Where the change's files, their paths and its commit message hold a
 * secret value `holds` knows (plain, base64 or URL-encoded). Reads one blob
 * at a time (call checkChangeSize first: each is then within its cap).
 */
export async function secretsInChange(
  mirror: string,
  files: ChangedFile[],
  message: string,
  holds: (content: string | Buffer) => string[],
): Promise<SecretFound[]> {
  const found: SecretFound[] = [];
  const add = (names: string[], where: string) => names.forEach((secret) => found.push({ secret, where }));
  add(holds(message), 'the commit message');
  for (const f of files) add(holds(f.path), `the path ${f.path}`);
  if (files.length === 0) return found;
  await eachBlob(mirror, files, (blob, i) => add(holds(blob), files[i].path));
  return found;
}

/**
 * Hands over each object's content as `git cat-file --batch` writes it (one
 * in memory at a time): a process of the worker's own, whose output is read
 * as it arrives (the process helper answers only with the whole output).
 */
function eachBlob(mirror: string, objects: { blob: string }[], each: (content: Buffer, index: number) => void) {
  return new Promise<void>((resolve, reject) => {
    const child = spawn('git', ['cat-file', '--batch'], { cwd: mirror, stdio: ['pipe', 'pipe', 'pipe'] });
    const objectsOut = new BatchReader(each);
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => objectsOut.push(chunk));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`git cat-file failed: ${stderr.trim()}`))));
    child.stdin.end(objects.map((o) => `${o.blob}\n`).join(''));
  });
}

/**
 * `git cat-file --batch` output ("<id> <type> <size>\n<content>\n" per
 * object) split into objects as it arrives, each content copied once.
 */
class BatchReader {
  private parts: Buffer[] = [];
  private have = 0;
  /** The content's size once its header is read; then its bytes and the newline are awaited. */
  private size?: number;
  private index = 0;

  constructor(private readonly each: (content: Buffer, index: number) => void) {}

  push(chunk: Buffer): void {
    this.parts.push(chunk);
    this.have += chunk.length;
    for (;;) {
      if (this.size === undefined) {
        const head = Buffer.concat(this.parts);
        const newline = head.indexOf(10);
        if (newline === -1) return void (this.parts = [head]);
        this.size = Number(head.subarray(0, newline).toString().split(' ')[2]);
        this.parts = [head.subarray(newline + 1)];
        this.have = head.length - newline - 1;
      }
      if (this.have < this.size + 1) return;
      const all = Buffer.concat(this.parts);
      this.each(all.subarray(0, this.size), this.index++);
      this.parts = [all.subarray(this.size + 1)];
      this.have = all.length - this.size - 1;
      this.size = undefined;
    }
  }
}
