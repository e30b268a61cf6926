/**
 * Text that came out of a sandbox (an error's tail, test names and messages),
 * published on a forge under drydock's identity: never as Markdown. In a
 * comment or a check run's summary it sits in a code fence longer than any
 * run of backticks inside it (so it cannot close the fence and go on as
 * Markdown: links, images, HTML); everywhere, @mentions lose their @ so that
 * nobody is notified in drydock's name.
 */

/** `@name` and `@org/team` without their @ (an e-mail address keeps it: nobody is notified by one). */
export function withoutMentions(text: string): string {
  return text.replace(/(^|[^\w.+-])@(?=[A-Za-z0-9])/g, '$1');
}

/** The text as a Markdown code block that nothing inside it can end, its mentions dropped. */
export function fenced(text: string): string {
  const longest = Math.max(0, ...(text.match(/`+/g) ?? []).map((run) => run.length));
  const fence = '`'.repeat(Math.max(3, longest + 1));
  return `${fence}text\n${withoutMentions(text).replace(/\r/g, '')}\n${fence}`;
}
