/** OpenTelemetry helpers for the metrics tests. */
import { MetricReader, type MetricData } from '@opentelemetry/sdk-metrics';
import { expect } from 'vitest';

/** A reader that exports nothing: the test collects when it wants to. */
export class TestReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

/** Every metric the reader collects now; fails the test on collection errors. */
export async function collect(reader: MetricReader): Promise<MetricData[]> {
  const { resourceMetrics, errors } = await reader.collect();
  expect(errors).toEqual([]);
  return resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics);
}
