import { defineConfig } from 'vitest/config';

/**
 * test/serial/: integration tests that load the machine themselves or measure latency through a
 * failover (a forked process saturating a core; five Redis processes and two workers; a Cluster
 * master killed under load): they run with the chaos suite, one file at a time, not beside the other
 * integration files (run beside them on a loaded machine, a Cluster failover test missed its deadlines).
 */
const SERIAL = 'test/serial/**/*.test.ts';

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          environment: 'node',
        },
      },
      {
        test: {
          name: 'chaos',
          include: ['chaos/**/*.test.ts', SERIAL],
          environment: 'node',
          // One file at a time: the scenarios measure latency, which other files' load would distort.
          fileParallelism: false,
          testTimeout: 60_000,
          hookTimeout: 120_000,
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          environment: 'node',
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
