/**
 * What the worker checks of a change before a reviewer sees it and before it
 * is pushed: how big its files are once inflated (a git bundle is
 * compressed: a 1 MB bundle can hold gigabytes, which `git diff --binary`
 * would load whole), and whether it holds the value of a secret the worker
 * knows. The reviewer sees the change byte for byte as it would be pushed,
 * so a secret in it is refused, never hidden.
 */
import { git } from './git';
import { runProcess, runProcessBytes } from '../platform/processes';
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

/** The bytes of blobs one `git cat-file --batch` reads at most (one larger blob goes alone). */
const BATCH_BYTES = 8 * 1024 * 1024;

/**
 * Hands over each object's content as `git cat-file --batch` writes it,
 * through the process helper (no fork of the worker): the objects in
 * batches of at most BATCH_BYTES by their known sizes, so that one batch's
 * output, not the change's, is in memory at a time.
 */
async function eachBlob(mirror: string, objects: ChangedFile[], each: (content: Buffer, index: number) => void) {
  let index = 0;
  for (const batch of batchesOf(objects)) {
    const bytes = batch.reduce((sum, o) => sum + o.size, 0);
    const { stdout } = await runProcessBytes('git', ['cat-file', '--batch'], {
      cwd: mirror,
      input: batch.map((o) => `${o.blob}\n`).join(''),
      // Besides the contents, each object's header line ("<id> blob <size>") and a newline.
      maxBuffer: bytes + batch.length * 128 + 4096,
    });
    for (const content of batchContents(stdout)) each(content, index++);
  }
}

function batchesOf(objects: ChangedFile[]): ChangedFile[][] {
  const batches: ChangedFile[][] = [];
  let bytes = 0;
  for (const o of objects) {
    if (batches.length === 0 || bytes + o.size > BATCH_BYTES) {
      batches.push([]);
      bytes = 0;
    }
    batches.at(-1)!.push(o);
    bytes += o.size;
  }
  return batches;
}

/** `git cat-file --batch` output ("<id> <type> <size>\n<content>\n" per object) as each content (views, no copies). */
function batchContents(out: Buffer): Buffer[] {
  const contents: Buffer[] = [];
  for (let at = 0; at < out.length;) {
    const newline = out.indexOf(10, at);
    const [id, type, size] = out.subarray(at, newline).toString().split(' ');
    if (type === 'missing' || size === undefined) throw new Error(`git cat-file: object ${id} is missing`);
    const end = newline + 1 + Number(size);
    contents.push(out.subarray(newline + 1, end));
    at = end + 1;
  }
  return contents;
}
