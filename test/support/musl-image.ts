/**
 * A musl-based image for tests, Alpine's kind (musl's loader, BusyBox, no
 * glibc, no git), built here from Debian trixie's `musl` and `busybox-static`
 * packages: Alpine's own root filesystem is published only on Alpine's
 * servers and GitHub, neither of which this project may fetch from. It holds
 * a C program linked against musl (`/usr/local/bin/hello-musl`), so a test
 * can tell the image's programs run on musl while drydock's helpers run on
 * their own runtime. Tagged by the hash of its recipe; built once per host.
 */
import { execFile, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { ensureDebian } from '../../sandbox-images/base-image';

const run = promisify(execFile);

const DOCKERFILE = `FROM debian:trixie-slim AS build
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends musl musl-dev musl-tools gcc libc6-dev busybox-static
RUN printf '#include <stdio.h>\\nint main(void) { puts("hello from musl"); return 0; }\\n' >/hello.c \\
 && musl-gcc -o /hello-musl /hello.c \\
 && mkdir -p /out/bin /out/lib /out/etc /out/tmp /out/usr/local/bin \\
 && cp /bin/busybox /out/bin/ && cp -L /lib/ld-musl-x86_64.so.1 /out/lib/ && cp /hello-musl /out/usr/local/bin/ \\
 && printf 'root:x:0:0:root:/root:/bin/sh\\ndrydock:x:1000:1000::/home/drydock:/bin/sh\\n' >/out/etc/passwd \\
 && printf 'root:x:0:\\ndrydock:x:1000:\\n' >/out/etc/group && chmod 1777 /out/tmp
FROM scratch
COPY --from=build /out/ /
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ENV PATH=/usr/local/bin:/bin
CMD ["sh"]
`;

/** The tag of the musl test image, built when this host lacks it. */
export async function ensureMuslImage(): Promise<string> {
  const tag = `drydock-test-musl:${createHash('sha256').update(DOCKERFILE).digest('hex').slice(0, 12)}`;
  const present = await run('docker', ['image', 'inspect', tag]).then(
    () => true,
    () => false,
  );
  if (present) return tag;
  await ensureDebian();
  await new Promise<void>((resolve, reject) => {
    // --network host: the recipe's apt-get only (Debian's archive is reachable; no registry is).
    const child = spawn('docker', ['build', '--network', 'host', '-q', '-t', tag, '-'], {
      stdio: ['pipe', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    child.stdin.end(DOCKERFILE);
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`building ${tag} failed: ${err}`))));
  });
  return tag;
}
