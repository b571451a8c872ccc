/**
 * The Toxiproxy stand-in as its own process, so that faults never share an event loop with the
 * code under test:
 *
 *   node src/chaos/toxiproxy/main.ts [--host 127.0.0.1] [--port 0] [--seed N] [--no-exit-on-stdin-close]
 *
 * Once the API listens it prints exactly one line to stdout, `{"api":"http://127.0.0.1:<port>","pid":<pid>}`,
 * and logs to stderr. It stops, closing every proxy and socket, on SIGTERM, SIGINT, or when its stdin
 * closes (so that it dies with the parent that spawned it; `--no-exit-on-stdin-close` turns that off,
 * for a run in the background with stdin at /dev/null).
 *
 * `--seed` (else `TOXIPROXY_SEED`, else random) seeds every random draw: toxicity, jitter, slicing.
 */
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { ProxyCollection } from './collection.ts';
import { VERSION } from './handlers.ts';
import { createPrng, resolveSeed } from './prng.ts';
import { createApiServer } from './server.ts';

/** How long a shutdown may take before the process exits anyway. */
const SHUTDOWN_GRACE_MS = 2_000;

function fail(message: string): never {
  process.stderr.write(`toxiproxy: ${message}\n`);
  process.exit(2);
}

const { values } = parseArgs({
  options: {
    host: { type: 'string', default: '127.0.0.1' },
    port: { type: 'string', default: '0' },
    seed: { type: 'string' },
    'exit-on-stdin-close': { type: 'boolean', default: true },
  },
  allowNegative: true,
});

const port = /^\d+$/.test(values.port) ? Number(values.port) : Number.NaN;
if (!(port <= 65535)) fail(`Expected \`--port\` to be an integer from 0 to 65535, got \`${values.port}\` (string)`);
let seed: number;
try {
  seed = resolveSeed(values.seed, process.env['TOXIPROXY_SEED']);
} catch (error) {
  fail((error as Error).message);
}

const proxies = new ProxyCollection(createPrng(seed));
const api = createApiServer(proxies);
api.on('error', (error) => fail(`cannot listen on ${values.host}:${port}: ${error.message}`));
api.listen({ host: values.host, port }, () => {
  const { address, port: bound } = api.address() as AddressInfo;
  const host = address.includes(':') ? `[${address}]` : address;
  process.stdout.write(`${JSON.stringify({ api: `http://${host}:${bound}`, pid: process.pid })}\n`);
  process.stderr.write(`toxiproxy: stand-in for Toxiproxy ${VERSION} on http://${host}:${bound}, seed ${seed}\n`);
});

let stopping = false;
async function shutdown(): Promise<void> {
  if (stopping) return;
  stopping = true;
  setTimeout(() => process.exit(0), SHUTDOWN_GRACE_MS).unref();
  await proxies.closeAll();
  api.closeAllConnections();
  await new Promise((resolve) => api.close(resolve));
  process.exit(0);
}

process.on('SIGTERM', () => void shutdown());
process.on('SIGINT', () => void shutdown());
if (values['exit-on-stdin-close']) {
  process.stdin
    .on('end', () => void shutdown())
    .on('close', () => void shutdown())
    .on('error', () => void shutdown());
  process.stdin.resume();
}
