/**
 * The forges a process knows, and which one a repository is on: the one its
 * session names (a webhook's trigger says which forge sent it), else the one
 * whose URL the repository's clone URL is on (the registry's URL), else
 * GitHub, drydock's first forge (so a repo served from any other git host
 * publishes to GitHub as before the seam).
 */
import type { Forge, ForgeKind } from './forge';

export class ForgeSet {
  private readonly byKind = new Map<ForgeKind, Forge>();

  constructor(forges: Forge[]) {
    for (const forge of forges) this.byKind.set(forge.kind, forge);
  }

  /** The forge of `kind`, or undefined when this process has none configured. */
  get(kind: ForgeKind): Forge | undefined {
    return this.byKind.get(kind);
  }

  get all(): Forge[] {
    return [...this.byKind.values()];
  }

  /** The forge a repository is on: by name, else by URL, else GitHub. Throws when that one is not configured. */
  pick(of: { forge?: ForgeKind; url?: string }): Forge {
    const kind = of.forge ?? this.ownerOf(of.url) ?? 'github';
    const forge = this.byKind.get(kind);
    if (!forge) throw new ForgeNotConfigured(kind);
    return forge;
  }

  /** The forge (other than GitHub, the default) whose URL `url` is on. */
  private ownerOf(url: string | undefined): ForgeKind | undefined {
    if (!url) return undefined;
    return this.all.find((forge) => forge.kind !== 'github' && forge.owns(url))?.kind;
  }
}

/** A repository names a forge this process was given no settings for: retrying will not help. */
export class ForgeNotConfigured extends Error {
  name = 'ForgeNotConfigured';
  constructor(readonly kind: ForgeKind) {
    super(`no ${kind} forge is configured on this process (see docs/forges.md)`);
  }
}
