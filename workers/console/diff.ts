/**
 * A change as the reviewer reads it: one collapsible section per file with
 * line numbers, rendered by diff2html (its stylesheet is served from the
 * project, /assets), each with a "viewed" box and a form to comment on a line;
 * and the files of a change for the summary's rules (review/change-kinds.ts).
 */
import { html as diffToHtml, parse as parseDiff } from 'diff2html';
import type { DiffFile } from 'diff2html/lib/types';
import type { ChangedFile } from '../../review/change-kinds';
import { esc } from './page';

const nameOf = (file: DiffFile) => (file.newName === '/dev/null' ? file.oldName : file.newName);

function title(file: DiffFile): string {
  const renamed = file.oldName !== file.newName && file.oldName !== '/dev/null' && file.newName !== '/dev/null';
  return renamed ? `${file.oldName} → ${file.newName}` : nameOf(file);
}

/** The comment form of one file (the page's script fills the line from a click on a line number). */
function commentForm(path: string, i: string): string {
  return `<form class="line-comment" data-path="${esc(path)}" hidden>
<label for="line-${i}">Comment on line</label> <input id="line-${i}" class="comment-line" type="number" min="1" size="5" required>
<label for="body-${i}">of <code>${esc(path)}</code></label><br><textarea id="body-${i}" class="comment-body" rows="2" cols="70" maxlength="2000" required></textarea><br>
<button type="submit">Add comment</button> <button type="button" class="comment-cancel">Cancel</button></form>`;
}

/**
 * The diff, one <details> per file. `id` names this diff's elements (a page
 * shows the whole change and an interdiff); `commentable`: with the viewed
 * box and the comment form.
 */
export function diffHtml(diff: string, opts: { id: string; commentable: boolean }): string {
  const files = parseDiff(diff);
  if (files.length === 0) return `<pre>${esc(diff)}</pre>`;
  return files
    .map((file, n) => {
      const path = nameOf(file);
      const i = `${opts.id}-${n}`;
      const body = diffToHtml([file], { drawFileList: false, outputFormat: 'line-by-line', matching: 'none' });
      // Beside the summary, not in it: a control inside a <summary> is not reachable on its own.
      const viewed = opts.commentable
        ? `<label class="viewed-box"><input type="checkbox" class="viewed" data-path="${esc(path)}"> viewed</label>`
        : '';
      return `<div class="file-block" data-path="${esc(path)}">${viewed}<details open class="file" data-path="${esc(path)}"><summary><code>${esc(title(file))}</code> <span class="add">+${file.addedLines}</span> <span class="del">−${file.deletedLines}</span></summary>${body}${opts.commentable ? commentForm(path, i) : ''}</details></div>`;
    })
    .join('\n');
}

/** The files of a diff, with their first added lines (where a generator leaves its mark). */
export function changedFilesOf(diff: string): ChangedFile[] {
  return parseDiff(diff).map((f) => ({
    path: nameOf(f),
    ...(f.isRename ? { oldPath: f.oldName } : {}),
    status: f.isNew ? 'added' : f.isDeleted ? 'deleted' : f.isRename ? 'renamed' : 'modified',
    added: f.addedLines,
    deleted: f.deletedLines,
    ...(f.isBinary ? { binary: true } : {}),
    head: f.blocks
      .flatMap((b) => b.lines)
      .filter((l) => l.type === 'insert')
      .slice(0, 5)
      .map((l) => l.content.slice(1)),
  }));
}
