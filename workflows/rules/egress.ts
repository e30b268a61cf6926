/**
 * Egress allowlist rules: which hosts (and methods) a sandbox step may reach
 * through drydock's egress proxy (sandbox/egress.ts). Here, in workflows/, so
 * session inputs and workflows can carry rules; the proxy imports the type.
 */
import { z } from 'zod';

export const HTTP_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'CONNECT'] as const;

export const egressRule = z.strictObject({
  host: z
    .string()
    .regex(
      /^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$|^\[?[0-9A-Fa-f:.]+\]?$/,
      'a host name ("registry.npmjs.org"), a wildcard ("*.example.com") or an IP address',
    )
    .describe('Exact host name or IP address; "*.example.com" matches every subdomain (not example.com itself)'),
  port: z.number().int().min(1).max(65535).optional().describe('Default: 80 and 443'),
  methods: z
    .array(z.enum(HTTP_METHODS))
    .min(1)
    .optional()
    .describe(
      'Default: any. Listed, only these; https needs "CONNECT", and a tunnel cannot be restricted further (the proxy cannot see inside TLS)',
    ),
});

export type EgressRule = z.infer<typeof egressRule>;
