/**
 * The product folders as the tree has them, for the tests that guard the
 * layout (floors, the workflow boundary, the lint's reach): every top-level
 * folder holding TypeScript that git tracks or would track, the tests aside.
 * Read, not listed, so a new capability's folder is guarded from its first file.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';

export const root = path.resolve(__dirname, '../..');

/** Tracked and untracked-but-not-ignored files, relative to the root, with `/` separators. */
const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], {
  cwd: root,
  encoding: 'utf8',
})
  .split('\n')
  .filter((file) => file.includes('/'));

/** Top-level folders that are not product code. */
const NOT_PRODUCT = ['test'];

/** The TypeScript sources of the product folders, relative to the root. */
export const productSources = files.filter((file) => file.endsWith('.ts') && !NOT_PRODUCT.includes(file.split('/')[0]));

export const productFolders = [...new Set(productSources.map((file) => file.split('/')[0]))].sort();
