/** The check every backend passes before it is handed out, so a mis-wired setup fails early. */
import type { ChaosBackend, ProxiedRedis } from '../types.ts';
import { ping } from './ping.ts';

/** The parts of a backend the check uses. */
export type VerifiableBackend = Pick<ChaosBackend, 'kind' | 'toxiproxyUrl' | 'redis' | 'createRedisProxy'>;

const TIMEOUT_MS = 3_000;

/**
 * Checks that Toxiproxy answers `GET /version`, that Redis answers PING directly, and that a PING
 * through a first proxy reaches Redis. The proxy (`chaos-check-<pid>`) is deleted afterwards.
 * @param hint what to check when it fails, in the backend's own terms (appended to the message).
 * @throws Error saying which of the three steps failed, with the address involved and `hint`.
 */
export async function verifyBackend(backend: VerifiableBackend, hint: string): Promise<void> {
  const fail = (detail: string, cause: unknown): Error =>
    new Error(`The ${backend.kind} chaos backend is mis-wired: ${detail}. ${hint}`, { cause });

  try {
    await expectVersion(backend.toxiproxyUrl);
  } catch (error) {
    throw fail(`Toxiproxy at ${backend.toxiproxyUrl} did not answer GET /version (${(error as Error).message})`, error);
  }
  const { host, port } = backend.redis;
  try {
    await ping(host, port, TIMEOUT_MS);
  } catch (error) {
    throw fail(`Redis at ${host}:${port} did not answer PING (${(error as Error).message})`, error);
  }
  const name = `chaos-check-${process.pid}`;
  let proxied: ProxiedRedis;
  try {
    proxied = await backend.createRedisProxy(name);
  } catch (error) {
    throw fail(`Toxiproxy at ${backend.toxiproxyUrl} could not create the proxy ${name} (${(error as Error).message})`, error);
  }
  try {
    await ping(proxied.host, proxied.port, TIMEOUT_MS);
  } catch (error) {
    throw fail(
      `a PING through the proxy ${name} (clients dial ${proxied.host}:${proxied.port}; it listens on ` +
        `${proxied.proxy.listen} and dials ${proxied.proxy.upstream}) did not reach Redis (${(error as Error).message})`,
      error,
    );
  } finally {
    await proxied.proxy.remove().catch(() => {});
  }
}

/** `GET /version` must answer 200 with a body (JSON `{"version": …}` in 2.12, plain text before). */
async function expectVersion(url: string): Promise<void> {
  const response = await fetch(`${url}/version`, { signal: AbortSignal.timeout(TIMEOUT_MS) });
  const body = await response.text();
  if (response.status !== 200 || body.trim() === '') {
    throw new Error(`status ${response.status}, body ${JSON.stringify(body.slice(0, 200))}`);
  }
}
