/**
 * Extra CA certificates (DRYDOCK_EXTRA_CA_CERTS): the CA of a network that
 * intercepts TLS, trusted in every sandbox and snapshot build. The sandbox's
 * bundle is the image's own bundle plus the extra PEM, written on the host
 * into the sandbox's egress folder, which is mounted read-only: it is never
 * part of the container's filesystem, so a snapshot image (made of
 * /workspace alone) never carries it.
 */
import { readdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { SANDBOX_EGRESS_DIR } from './egress';
import type { SandboxHandle } from './handle';

const BUNDLE_NAME = 'ca-certificates.crt';
/** Where the combined bundle appears inside the sandbox. */
export const SANDBOX_CA_BUNDLE = `${SANDBOX_EGRESS_DIR}/${BUNDLE_NAME}`;
/** The Debian/Ubuntu/Alpine system bundle of an image. */
const IMAGE_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

/** The sandbox's environment: each client's own way of being told the bundle. */
export function caEnv(): string[] {
  const vars = [
    'NODE_EXTRA_CA_CERTS', // Node.js, so npm's registry client and corepack
    'npm_config_cafile',
    'GIT_SSL_CAINFO',
    'CURL_CA_BUNDLE',
    'PIP_CERT',
    'REQUESTS_CA_BUNDLE',
    'SSL_CERT_FILE', // OpenSSL's default, so Python's ssl and most others
  ];
  return vars.map((name) => `${name}=${SANDBOX_CA_BUNDLE}`);
}

/**
 * Writes the sandbox's combined bundle into its egress folder (mounted at
 * /run/drydock): the image's bundle, read from the sandbox itself (once per
 * image id: an image's files never change), then the extra PEM. Runs after
 * the sandbox starts and before any step, so every process of a step finds
 * it. Replaces the file whole (a retry rewrites it).
 */
export async function installCaBundle(
  sandbox: SandboxHandle,
  egressDir: string,
  extraPemPath: string,
  imageId?: string,
): Promise<void> {
  const extra = await readFile(extraPemPath, 'utf8');
  if (!extra.includes('-----BEGIN CERTIFICATE-----'))
    throw new Error(`DRYDOCK_EXTRA_CA_CERTS (${extraPemPath}) holds no PEM certificate`);
  const imageBundle = (imageId && IMAGE_BUNDLES.get(imageId)) ?? (await readImageBundle(sandbox));
  if (imageId) rememberBundle(imageId, imageBundle);
  const file = path.join(egressDir, BUNDLE_NAME);
  await writeFile(`${file}.tmp`, `${imageBundle.trimEnd()}\n${extra.trimEnd()}\n`, { mode: 0o644 });
  await rename(`${file}.tmp`, file);
}

async function readImageBundle(sandbox: SandboxHandle): Promise<string> {
  return (await sandbox.files.read(IMAGE_BUNDLE))?.toString('utf8') ?? '';
}

/** The image bundles read so far, by image id: a few hundred KiB each, so only the last few images'. */
const IMAGE_BUNDLES = new Map<string, string>();
const IMAGE_BUNDLES_KEPT = 16;

function rememberBundle(imageId: string, bundle: string): void {
  IMAGE_BUNDLES.delete(imageId);
  IMAGE_BUNDLES.set(imageId, bundle);
  if (IMAGE_BUNDLES.size > IMAGE_BUNDLES_KEPT) IMAGE_BUNDLES.delete(IMAGE_BUNDLES.keys().next().value!);
}

/** What clients print when a certificate chain ends in a CA they do not trust. */
const UNTRUSTED =
  /SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|UNABLE_TO_GET_ISSUER_CERT(_LOCALLY)?|UNABLE_TO_VERIFY_LEAF_SIGNATURE|self[- ]signed certificate in certificate chain|unable to get local issuer certificate|certificate verify failed|server certificate verification failed/i;

/** A plain account of a setup that failed on an untrusted certificate, naming the setting; undefined otherwise. */
export function certificateProblem(output: string): string | undefined {
  const seen = UNTRUSTED.exec(output);
  if (!seen) return undefined;
  return (
    `a TLS certificate was not trusted (${seen[0]}): the network intercepts TLS with its own CA; ` +
    "set DRYDOCK_EXTRA_CA_CERTS to the PEM of your network's CA"
  );
}

/** Where Debian, Ubuntu and Alpine keep a machine's own CAs (update-ca-certificates adds them to the system bundle). */
export const MACHINE_CA_DIR = '/usr/local/share/ca-certificates';

/** What `drydock up` knows of the machine's trust: its settings and its own CA files. */
export interface MachineTrust {
  /** DRYDOCK_EXTRA_CA_CERTS. */
  configured?: string;
  /** NODE_EXTRA_CA_CERTS, and whether that file holds a PEM certificate. */
  nodeExtra?: { file: string; pem: boolean };
  /** The PEM files under MACHINE_CA_DIR. */
  machineCas: string[];
}

/**
 * The extra CAs `drydock up` gives sandboxes, and the line it says so in: the
 * operator's DRYDOCK_EXTRA_CA_CERTS first; else the CAs this process trusts
 * beyond Node's own (NODE_EXTRA_CA_CERTS); else the machine's own CAs (one
 * file made of them: `combined`); else none. Sandboxes need what the machine
 * needs: a network that intercepts TLS does so for them too.
 */
export function devStackExtraCa(
  trust: MachineTrust,
  combined: string,
): { file?: string; from?: 'machine-cas'; line: string } {
  const choose = ' (DRYDOCK_EXTRA_CA_CERTS chooses another file)';
  if (trust.configured) {
    return {
      file: trust.configured,
      line: `sandboxes trust the extra CAs in ${trust.configured} (DRYDOCK_EXTRA_CA_CERTS)`,
    };
  }
  if (trust.nodeExtra?.pem) {
    const file = trust.nodeExtra.file;
    return {
      file,
      line: `sandboxes trust the extra CAs this machine's Node.js does: ${file} (NODE_EXTRA_CA_CERTS)${choose}`,
    };
  }
  if (trust.machineCas.length) {
    const cas = trust.machineCas.map((f) => path.basename(f)).join(', ');
    return {
      file: combined,
      from: 'machine-cas',
      line: `sandboxes trust this machine's own CAs (${cas} in ${MACHINE_CA_DIR}), copied to ${combined}${choose}`,
    };
  }
  const unused = trust.nodeExtra ? ` (NODE_EXTRA_CA_CERTS ${trust.nodeExtra.file} holds no PEM certificate)` : '';
  return {
    line:
      `sandboxes trust only their images' own CAs: this machine has no extra CA${unused}; ` +
      "if its network intercepts TLS, set DRYDOCK_EXTRA_CA_CERTS to the PEM of the network's CA",
  };
}

/**
 * Reads the machine's trust (devStackExtraCa), and when its own CAs are the
 * choice writes them as one PEM file `combined`. Returns the file, if any, and the line.
 */
export async function machineExtraCa(
  configured: string | undefined,
  env: NodeJS.ProcessEnv,
  combined: string,
  caDir = MACHINE_CA_DIR,
): Promise<{ file?: string; line: string }> {
  const pemIn = async (file: string) =>
    (await readFile(file, 'utf8').catch(() => '')).includes('-----BEGIN CERTIFICATE-----');
  const nodeFile = env.NODE_EXTRA_CA_CERTS;
  const listed = await readdir(caDir, { recursive: true }).catch(() => [] as string[]);
  const machineCas: string[] = [];
  for (const name of listed.filter((n) => n.endsWith('.crt') || n.endsWith('.pem')).sort()) {
    if (await pemIn(path.join(caDir, name))) machineCas.push(path.join(caDir, name));
  }
  const chosen = devStackExtraCa(
    {
      ...(configured ? { configured } : {}),
      ...(nodeFile ? { nodeExtra: { file: nodeFile, pem: await pemIn(nodeFile) } } : {}),
      machineCas,
    },
    combined,
  );
  if (chosen.from === 'machine-cas') {
    const pems = await Promise.all(machineCas.map((f) => readFile(f, 'utf8')));
    await writeFile(`${combined}.tmp`, pems.map((p) => `${p.trimEnd()}\n`).join(''), { mode: 0o644 });
    await rename(`${combined}.tmp`, combined);
  }
  return { ...(chosen.file ? { file: chosen.file } : {}), line: chosen.line };
}
