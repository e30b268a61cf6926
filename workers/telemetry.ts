/**
 * A worker's telemetry: the Temporal SDK runtime (its logs into pino, its
 * metrics on a loopback Prometheus exporter), drydock's metrics beside them on
 * DRYDOCK_METRICS_PORT, and OpenTelemetry traces of workflows and activities
 * when OTEL_EXPORTER_OTLP_ENDPOINT names a collector.
 */
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { OpenTelemetryPlugin } from '@temporalio/interceptors-opentelemetry';
import { DefaultLogger, Runtime, type LogLevel } from '@temporalio/worker';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { Resource } from '@opentelemetry/resources';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Config } from '../platform/config';
import type { Logger } from '../platform/log';

/** A free port on loopback, for the SDK's own exporter (it takes an address, not port 0). */
async function freeLoopbackPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/**
 * Installs the SDK runtime once per process, before any worker: its log lines
 * go to pino and, with DRYDOCK_METRICS_PORT set, its metrics (task slots,
 * schedule-to-start latency, ...) to a loopback exporter whose URL this
 * returns, for the worker's /metrics to include.
 */
export async function installTemporalRuntime(
  log: Logger,
  config: Pick<Config, 'DRYDOCK_METRICS_PORT'>,
): Promise<string | undefined> {
  const levels: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
    TRACE: 'trace',
    DEBUG: 'debug',
    INFO: 'info',
    WARN: 'warn',
    ERROR: 'error',
  };
  const sdkPort = config.DRYDOCK_METRICS_PORT === undefined ? undefined : await freeLoopbackPort();
  Runtime.install({
    logger: new DefaultLogger('INFO', (entry) => log[levels[entry.level]]({ ...entry.meta }, entry.message)),
    // drainOnSignals handles them: the SDK's own handler has no "twice forces".
    shutdownSignals: [],
    ...(sdkPort
      ? {
          telemetryOptions: {
            metrics: {
              prometheus: {
                bindAddress: `127.0.0.1:${sdkPort}`,
                countersTotalSuffix: true,
                unitSuffix: true,
                useSecondsForDurations: true,
              },
            },
          },
        }
      : {}),
  });
  return sdkPort ? `http://127.0.0.1:${sdkPort}/metrics` : undefined;
}

/**
 * Tracing of workflows, activities and the client calls that start them, as
 * a Temporal plugin for workers and clients; undefined when no collector is
 * configured. Spans go out in batches over OTLP/HTTP; `shutdown` flushes them.
 */
export function tracing(
  config: Pick<Config, 'OTEL_EXPORTER_OTLP_ENDPOINT' | 'OTEL_SERVICE_NAME'>,
): { plugin: OpenTelemetryPlugin; shutdown(): Promise<void> } | undefined {
  if (!config.OTEL_EXPORTER_OTLP_ENDPOINT) return undefined;
  const resource = new Resource({ 'service.name': config.OTEL_SERVICE_NAME });
  const url = `${config.OTEL_EXPORTER_OTLP_ENDPOINT.replace(/\/$/, '')}/v1/traces`;
  const spanProcessor = new BatchSpanProcessor(new OTLPTraceExporter({ url }));
  // Activity spans use the global tracer; workflow spans come through the plugin's sink.
  const provider = new BasicTracerProvider({ resource, spanProcessors: [spanProcessor] });
  provider.register();
  return { plugin: new OpenTelemetryPlugin({ resource, spanProcessor }), shutdown: () => provider.shutdown() };
}
