/**
 * The README's map of the code against the tree: every source file of the
 * product folders is named under its folder, every folder is named, and
 * nothing the map names is missing from the tree (a moved file fails here,
 * not in a newcomer's hands).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';

const root = path.resolve(__dirname, '../..');
const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
const tracked = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], {
  cwd: root,
  encoding: 'utf8',
})
  .split('\n')
  .filter(Boolean);

/** Folders named in the map whose files it need not list one by one (data, scripts, tests, docs). */
const NAMED_AS_A_WHOLE = [
  'store/migrations/',
  'infra/',
  'test/',
  'docs/',
  'bench/workflows/',
  'workers/console/assets/',
];
/** Folders of the map: each of their files must be named. */
const LISTED = [
  'workflows/',
  'platform/',
  'store/',
  'models/',
  'github/',
  'repos/',
  'identity/',
  'slack/',
  'linear/',
  'mcp/',
  'review/',
  'sandbox/',
  'activities/',
  'workers/',
  'cli/',
  'sandbox-images/',
  'bench/',
];

/** The map's code block. */
function mapBlock(): string[] {
  const section = readme.slice(readme.indexOf('## Map of the code'));
  const start = section.indexOf('```\n') + 4;
  return section.slice(start, section.indexOf('```', start)).split('\n');
}

/**
 * What the map names: folders (by path) and, per folder, the file names it
 * lists. An entry is the text before its description (two spaces or more);
 * a line indented to the description column continues the entry above; a
 * name with a slash in a description points elsewhere and is not counted.
 */
function parseMap(lines: string[]): { folders: Set<string>; files: Map<string, Set<string>> } {
  const folders = new Set<string>();
  const files = new Map<string, Set<string>>();
  const stack: string[] = [];
  let current = '';
  const add = (folder: string, name: string) => {
    if (!files.has(folder)) files.set(folder, new Set());
    files.get(folder)!.add(name);
  };
  const fileNames = (text: string) =>
    (text.match(/[\w.-]+\.(ts|mjs|json|md|sh|sql|yaml|Dockerfile)\b|drydock-[\w-]+|Dockerfile/g) ?? []).filter(
      (name) => !text.includes(`/${name}`),
    );
  for (const line of lines) {
    if (!line.trim()) continue;
    const indent = line.length - line.trimStart().length;
    const [entry, ...rest] = line.trim().split(/\s{2,}/);
    const description = rest.join('  ');
    if (indent >= 20) {
      for (const name of fileNames(line)) add(current, name);
      for (const sub of line.trim().match(/(^|\s)([\w-]+\/)(?=[\s,;.)]|$)/g) ?? []) {
        folders.add(current + sub.trim());
      }
      continue;
    }
    const depth = indent / 2;
    stack.length = depth;
    if (entry.endsWith('/')) {
      current = stack.join('') + entry;
      stack.push(entry);
      folders.add(current);
    } else {
      current = stack.join('');
      for (const name of fileNames(entry)) add(current, name);
    }
    for (const name of fileNames(description)) add(current, name);
    for (const sub of description.match(/(^|\s)([\w-]+\/)(?=[\s,;.)]|$)/g) ?? []) folders.add(current + sub.trim());
  }
  return { folders, files };
}

const map = parseMap(mapBlock());

test('every source file of the product folders is named under its folder', () => {
  const unnamed = tracked.filter((file) => {
    if (!LISTED.some((dir) => file.startsWith(dir))) return false;
    if (NAMED_AS_A_WHOLE.some((dir) => file.startsWith(dir))) return false;
    const folder = file.slice(0, file.lastIndexOf('/') + 1);
    return !map.files.get(folder)?.has(path.basename(file));
  });
  expect(unnamed).toEqual([]);
});

test('every folder of the product folders is named', () => {
  const folders = new Set(
    tracked.flatMap((file) => {
      const parts = file.split('/').slice(0, -1);
      return parts.map((_, i) => `${parts.slice(0, i + 1).join('/')}/`);
    }),
  );
  const unnamed = [...folders].filter(
    (dir) =>
      (LISTED.some((top) => dir.startsWith(top)) || dir.split('/').length === 2) &&
      !NAMED_AS_A_WHOLE.some((whole) => dir.startsWith(whole) && dir !== whole) &&
      !dir.startsWith('.') &&
      !map.folders.has(dir),
  );
  expect(unnamed.filter((dir) => !['bin/'].includes(dir))).toEqual([]);
});

test('everything the map names is in the tree', () => {
  const missingFolders = [...map.folders].filter((dir) => !tracked.some((file) => file.startsWith(dir)));
  const missingFiles = [...map.files].flatMap(([folder, names]) =>
    [...names].filter((name) => !tracked.includes(folder + name)).map((name) => folder + name),
  );
  expect({ missingFolders, missingFiles }).toEqual({ missingFolders: [], missingFiles: [] });
});
