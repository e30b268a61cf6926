/** The review console's HTML: page chrome and small pages, a session, its diff, summary and evidence. */
export { esc, listPage, loginPage, page, reportPage, signedInPage, tokensPage } from './page';
export { changeOnDisplay, liveVersion, sessionLive, sessionPage, type LiveExtras } from './session';
export { changedFilesOf } from './diff';
export type { ReviewFacts } from './summary';
