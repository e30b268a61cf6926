/**
 * The editor's pure parts (sandbox/editor.ts, docs/editor.md): each session's
 * editor origin, which Hosts are one, its passes (refused on another
 * session's editor origin and on its preview's), and drydock's cookies kept
 * from code-server. The editor itself runs in test/e2e/editor.test.ts.
 */
import { editorDirOf, editorLabel, editorLabelOf, editorOrigin } from '../../sandbox/editor';
import { previewLabel, PreviewPasses } from '../../sandbox/preview';
import { appHeaders } from '../../workers/routes/preview';

const BASE = 'http://preview.localhost:8080';

test("a session's editor origin has a label of its own, not its preview's", () => {
  expect(editorLabel('s-1')).toMatch(/^e[0-9a-f]{24}$/);
  expect(editorLabel('s-1')).not.toBe(editorLabel('s-2'));
  expect(editorLabel('s-1').slice(1)).not.toBe(previewLabel('s-1').slice(1));
  expect(editorOrigin(BASE, 's-1')).toBe(`http://${editorLabel('s-1')}.preview.localhost:8080`);
});

test('only an e-label right under the preview host is an editor origin', () => {
  const label = editorLabel('s-1');
  expect(editorLabelOf(`${label}.preview.localhost:8080`, BASE)).toBe(label);
  expect(editorLabelOf(`${label.toUpperCase()}.PREVIEW.localhost`, BASE)).toBe(label);
  expect(editorLabelOf(`${previewLabel('s-1')}.preview.localhost:8080`, BASE)).toBeUndefined();
  expect(editorLabelOf(`x.${label}.preview.localhost`, BASE)).toBeUndefined();
  expect(editorLabelOf(`${label}.preview.localhost.evil.example`, BASE)).toBeUndefined();
  expect(editorLabelOf('localhost:8080', BASE)).toBeUndefined();
  expect(editorLabelOf(undefined, BASE)).toBeUndefined();
});

test("an editor pass opens its session's editor origin only", () => {
  const passes = new PreviewPasses(undefined, editorLabel, 'editor');
  const pass = passes.issue('cookie', { sessionId: 's-1', who: 'alice' }, 0);
  expect(passes.check(pass, 'cookie', editorLabel('s-1'), 1)).toEqual({ sessionId: 's-1', who: 'alice' });
  expect(passes.check(pass, 'cookie', editorLabel('s-2'), 1)).toMatch(/another session's: open this session's editor/);
  expect(passes.check(pass, 'cookie', previewLabel('s-1'), 1)).toMatch(/another session's/);
  expect(passes.check(pass, 'enter', editorLabel('s-1'), 1)).toMatch(/editor pass is not valid/);
  expect(passes.check(undefined, 'cookie', editorLabel('s-1'), 1)).toMatch(/^no editor pass/);
  // A preview's pass (another key) is no editor pass.
  const preview = new PreviewPasses().issue('cookie', { sessionId: 's-1', who: 'alice' }, 0);
  expect(passes.check(preview, 'cookie', editorLabel('s-1'), 1)).toMatch(/not valid here/);
});

test("drydock's cookies never reach code-server; its Host is its own", () => {
  const headers = appHeaders(
    { host: 'e1.preview.localhost', cookie: 'drydock_editor=x; drydock_token=y; drydock_preview=z; vscode-tkn=1' },
    47813,
    editorOrigin(BASE, 's-1'),
  );
  expect(headers.cookie).toBe('vscode-tkn=1');
  expect(headers.host).toBe('localhost:47813');
  expect(headers['x-forwarded-host']).toBe(`${editorLabel('s-1')}.preview.localhost:8080`);
});

test('a folder is the editor only when it holds bin/code-server', () => {
  expect(editorDirOf(undefined)).toBeUndefined();
  expect(editorDirOf(__dirname)).toBeUndefined();
});
