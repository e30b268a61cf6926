/** Sandbox text on GitHub: the forge-wide rules (forge/sandbox-text.ts). */
export { fenced, withoutMentions } from '../forge/sandbox-text';
