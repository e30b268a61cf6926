/**
 * The built-in loop's conversation, kept in the artifact store as one file per
 * message (`agent/messages/<index>.json`): workflow history carries only
 * indexes, and a retried activity finds what an earlier attempt wrote.
 */
import type { ChatMessage } from '../models/llm';
import type { ArtifactStore } from '../store/artifacts';

export const messageName = (index: number) => `agent/messages/${String(index).padStart(6, '0')}.json`;

export async function readMessages(artifacts: ArtifactStore, sessionId: string, count: number) {
  const messages: ChatMessage[] = [];
  for (let i = 0; i < count; i++) {
    const stored = await artifacts.get(sessionId, messageName(i));
    if (!stored) throw new Error(`message ${i} of the conversation is missing from the artifact store`);
    messages.push(JSON.parse(stored.toString()) as ChatMessage);
  }
  return messages;
}

export async function writeMessage(
  artifacts: ArtifactStore,
  sessionId: string,
  index: number,
  message: ChatMessage,
): Promise<void> {
  await artifacts.put(sessionId, messageName(index), JSON.stringify(message));
}
