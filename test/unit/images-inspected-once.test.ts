/**
 * Provisioning reads each image once (sandbox/activities/provision.ts,
 * imagesInspectedOnce), but only an image that is there: a cold start that
 * builds its environment asks for the image before the build (none) and after
 * it (there). Caching the first answer failed every such first attempt with
 * "the isolated builder's result … is not on the host after its load".
 */
import type { ImageInfo, SandboxProvider } from '../../sandbox/provider';
import { imagesInspectedOnce } from '../../sandbox/activities/provision';

function providerWith(images: Map<string, ImageInfo>): { provider: SandboxProvider; asked: string[] } {
  const asked: string[] = [];
  const imageStore = {
    image: async (ref: string) => {
      asked.push(ref);
      if (ref === 'broken') throw new Error('engine busy');
      return images.get(ref);
    },
  };
  return { provider: { imageStore } as unknown as SandboxProvider, asked };
}

const info = { id: 'sha256:1' } as ImageInfo;

test('an image found is inspected once; one not there yet is asked again and found once built', async () => {
  const images = new Map([['snapshot', info]]);
  const { provider, asked } = providerWith(images);
  const store = imagesInspectedOnce(provider).imageStore!;
  expect(await store.image('snapshot')).toBe(info);
  expect(await store.image('snapshot')).toBe(info);
  expect(await store.image('built')).toBeUndefined();
  images.set('built', info); // the build loaded it
  expect(await store.image('built')).toBe(info);
  expect(await store.image('built')).toBe(info);
  expect(asked).toEqual(['snapshot', 'built', 'built']);
});

test('a failed inspect is asked again', async () => {
  const { provider, asked } = providerWith(new Map());
  const store = imagesInspectedOnce(provider).imageStore!;
  await expect(store.image('broken')).rejects.toThrow('engine busy');
  await expect(store.image('broken')).rejects.toThrow('engine busy');
  expect(asked).toEqual(['broken', 'broken']);
});
