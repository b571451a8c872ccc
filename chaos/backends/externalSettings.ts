/** The environment of the external backend, read and checked in one place. */
import { isIP } from 'node:net';
import { joinHostPort, splitHostPort } from '../../src/chaos/toxiproxy/address.ts';
import { parsePortList } from './portList.ts';
import type { Env } from './settings.ts';

/** Where the user's Toxiproxy and Redis are, and how proxies are laid out on that Toxiproxy. */
export type ExternalSettings = {
  /** `TOXIPROXY_URL` without a trailing slash. */
  readonly toxiproxyUrl: string;
  /** `TOXIPROXY_URL`'s host: clients dial proxies there. */
  readonly proxyHost: string;
  /** `REDIS_URL`'s host and port (default 6379): Redis without the proxy. */
  readonly redis: { readonly host: string; readonly port: number };
  /** What Toxiproxy dials: `CHAOS_REDIS_UPSTREAM`, else `REDIS_URL`'s host:port. */
  readonly upstream: string;
  /** The host proxies listen on, inside Toxiproxy's own network. */
  readonly listenHost: string;
  /** `CHAOS_PROXY_PORTS`; empty: port 0 (the OS picks). */
  readonly ports: readonly number[];
};

const HOW_TO_RUN =
  'Start the servers and point the suite at them: `docker compose up -d`, then ' +
  '`CHAOS_BACKEND=external TOXIPROXY_URL=http://127.0.0.1:8474 REDIS_URL=redis://127.0.0.1:6379 ' +
  'CHAOS_REDIS_UPSTREAM=redis:6379 CHAOS_PROXY_PORTS=26379-26390 npm run chaos`.';

/**
 * Reads `TOXIPROXY_URL` and `REDIS_URL` (both required), `CHAOS_REDIS_UPSTREAM`,
 * `CHAOS_PROXY_LISTEN_HOST` and `CHAOS_PROXY_PORTS`.
 *
 * `CHAOS_PROXY_LISTEN_HOST` defaults to `127.0.0.1` when `TOXIPROXY_URL`'s host is a loopback
 * address and `CHAOS_PROXY_PORTS` is unset, else to `0.0.0.0`: with `CHAOS_PROXY_PORTS` Toxiproxy is
 * taken to run in a container whose ports are published, and a published port reaches only a
 * listener on the container's own addresses, never one on its 127.0.0.1.
 * @throws Error naming a missing or malformed variable, with the command that runs the suite.
 */
export function resolveExternalSettings(env: Env): ExternalSettings {
  const missing = ['TOXIPROXY_URL', 'REDIS_URL'].filter((name) => !env[name]);
  if (missing.length > 0) {
    throw new Error(
      `The external chaos backend needs ${missing.map((m) => `\`${m}\``).join(' and ')}, which ${missing.length > 1 ? 'are' : 'is'} not set. ${HOW_TO_RUN}`,
    );
  }
  const api = parseUrl('TOXIPROXY_URL', env['TOXIPROXY_URL'] as string, ['http:', 'https:']);
  const redisUrl = parseUrl('REDIS_URL', env['REDIS_URL'] as string, ['redis:']);
  if (redisUrl.username || redisUrl.password || !['', '/', '/0'].includes(redisUrl.pathname)) {
    throw new Error(
      `Expected \`REDIS_URL\` to be redis://host:port without credentials or a database (the chaos backends only pass host and port on), got \`${redisUrl.href}\``,
    );
  }
  const redis = { host: unbracket(redisUrl.hostname), port: Number(redisUrl.port || 6379) };
  const upstream = env['CHAOS_REDIS_UPSTREAM'] || joinHostPort(redis.host, redis.port);
  checkAddress('CHAOS_REDIS_UPSTREAM', upstream);
  const portsValue = env['CHAOS_PROXY_PORTS'] ?? '';
  const ports = portsValue.trim() === '' ? [] : parsePortList(portsValue);
  const proxyHost = unbracket(api.hostname);
  const listenHost = env['CHAOS_PROXY_LISTEN_HOST'] || (isLoopback(proxyHost) && ports.length === 0 ? '127.0.0.1' : '0.0.0.0');
  return Object.freeze({
    toxiproxyUrl: api.href.replace(/\/+$/, ''),
    proxyHost,
    redis,
    upstream,
    listenHost,
    ports,
  });
}

function parseUrl(variable: string, value: string, protocols: readonly string[]): URL {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(`Expected \`${variable}\` to be a URL (${protocols.join(' or ')}//host:port), got \`${value}\``);
  }
  if (!protocols.includes(url.protocol) || url.hostname === '') {
    throw new Error(`Expected \`${variable}\` to be a URL (${protocols.join(' or ')}//host:port), got \`${value}\``);
  }
  return url;
}

function checkAddress(variable: string, value: string): void {
  let port = 0;
  try {
    port = splitHostPort(value).port;
  } catch {
    /* reported below */
  }
  if (port === 0) throw new Error(`Expected \`${variable}\` to be host:port with a port (e.g. redis:6379), got \`${value}\``);
}

function unbracket(host: string): string {
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
}

function isLoopback(host: string): boolean {
  if (host === 'localhost' || host === '::1') return true;
  return isIP(host) === 4 && host.startsWith('127.');
}
