/**
 * drydock's own service images run on Kubernetes as fixed numeric ids
 * (sandbox/kubernetes/images.ts OWN_SERVICE_USERS), since their USER is a name
 * the kubelet cannot verify under runAsNonRoot: the images built here from
 * their recipes must have those ids, or a service would run as a stranger to
 * its own files. Docker alone; no cluster.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { ensureServiceImage, SERVICE_RECIPES, type ServiceImageName } from '../../sandbox-images/service-images';
import { OWN_SERVICE_USERS } from '../../sandbox/kubernetes/images';

const run = promisify(execFile);

test("each service image's user has the ids a Kubernetes service of it runs as", async () => {
  expect(Object.keys(OWN_SERVICE_USERS).sort()).toEqual(Object.keys(SERVICE_RECIPES).sort());
  for (const [name, ids] of Object.entries(OWN_SERVICE_USERS)) {
    const image = await ensureServiceImage(name as ServiceImageName);
    const { stdout } = await run('docker', [
      'run',
      '--rm',
      '--network',
      'none',
      '--entrypoint',
      'sh',
      image,
      '-c',
      'id -u; id -g',
    ]);
    expect([name, stdout.trim().split('\n').map(Number)]).toEqual([name, [ids.uid, ids.gid]]);
  }
});
