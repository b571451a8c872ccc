/**
 * docker-compose.yml cannot be run here (no Docker engine), so this checks what can be checked
 * without one: the file declares the servers, images, ports and health checks that docs/chaos.md,
 * the `container` backend and the `external` backend expect, and the commands docs/chaos.md gives
 * for it are the ones the external backend accepts.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { REDIS_IMAGE, TOXIPROXY_IMAGE } from '../../chaos/backends/container.ts';
import { resolveExternalSettings } from '../../chaos/backends/externalSettings.ts';

const compose = parse(readFileSync(new URL('../../docker-compose.yml', import.meta.url), 'utf8')) as {
  services: Record<string, Service>;
};
// The chaos suite and the demo are documented there (the README links to it).
const chaosDoc = readFileSync(new URL('../../docs/chaos.md', import.meta.url), 'utf8');

type Service = {
  image: string;
  command?: string[];
  ports?: string[];
  healthcheck?: { test: string[] };
  depends_on?: Record<string, { condition: string }>;
};

/** The environment variables set on docs/chaos.md's `CHAOS_BACKEND=external …` command line. */
function documentedExternalEnv(): Record<string, string> {
  const lines = chaosDoc.split('\n');
  let at = lines.findIndex((line) => line.startsWith('CHAOS_BACKEND=external '));
  if (at < 0) throw new Error('docs/chaos.md gives no CHAOS_BACKEND=external command');
  let command = lines[at] as string;
  while (command.endsWith('\\')) command = `${command.slice(0, -1)} ${lines[++at] ?? ''}`;
  const words = command.split(/\s+/);
  return Object.fromEntries(words.filter((w) => /^[A-Z_]+=/.test(w)).map((w) => w.split('=', 2) as [string, string]));
}

/** `a:b` or `a-b:c-d` published ports → [host, container] pairs, one per port. */
function published(ports: readonly string[] | undefined): [number, number][] {
  return (ports ?? []).flatMap((spec) => {
    const [host, container] = spec.split(':') as [string, string];
    const range = (s: string) => s.split('-').map(Number) as [number, number?];
    const [h0, h1 = h0] = range(host);
    const [c0] = range(container);
    return Array.from({ length: h1 - h0 + 1 }, (_, i): [number, number] => [h0 + i, c0 + i]);
  });
}

describe('docker-compose.yml', () => {
  const { redis, toxiproxy } = compose.services as { redis: Service; toxiproxy: Service };

  it('declares Redis and the real Toxiproxy, with the images the container backend uses', () => {
    expect(Object.keys(compose.services).sort()).toEqual(['redis', 'toxiproxy']);
    expect(TOXIPROXY_IMAGE).toBe('ghcr.io/shopify/toxiproxy:2.12.0');
    expect(toxiproxy.image).toBe(TOXIPROXY_IMAGE);
    expect(redis.image).toBe(REDIS_IMAGE);
    // The backend table of docs/chaos.md names the same images.
    expect(chaosDoc).toContain(`\`${REDIS_IMAGE}\``);
    expect(chaosDoc).toContain(`\`${TOXIPROXY_IMAGE}\``);
  });

  it('gives both services a health check, and starts Toxiproxy once Redis is healthy', () => {
    expect(redis.healthcheck?.test.join(' ')).toMatch(/redis-cli.*ping/i);
    expect(toxiproxy.healthcheck?.test.join(' ')).toMatch(/toxiproxy-cli/);
    expect(toxiproxy.depends_on).toEqual({ redis: { condition: 'service_healthy' } });
  });

  it('publishes the ports that the documented command and the external backend use', () => {
    const env = documentedExternalEnv();
    const settings = resolveExternalSettings(env);
    const apiPort = Number(new URL(settings.toxiproxyUrl).port);
    // Toxiproxy's API listens on 0.0.0.0:<port> inside its container, published on the same port.
    expect(toxiproxy.command).toEqual(['-host', '0.0.0.0', '-port', String(apiPort)]);
    expect(published(toxiproxy.ports)).toContainEqual([apiPort, apiPort]);
    // Redis is published on the port of the documented REDIS_URL, from the container port Toxiproxy dials.
    const upstreamPort = Number(settings.upstream.slice(settings.upstream.lastIndexOf(':') + 1));
    expect(published(redis.ports)).toContainEqual([settings.redis.port, upstreamPort]);
    // Every proxy port the suite will ask for is published, on the same port inside.
    expect(settings.ports.length).toBeGreaterThan(0);
    for (const port of settings.ports) expect(published(toxiproxy.ports)).toContainEqual([port, port]);
    // Inside its network, Toxiproxy reaches Redis by its service name and container port.
    expect(settings.upstream).toBe('redis:6379');
    // A published port reaches only a listener on the container's own addresses.
    expect(settings.listenHost).toBe('0.0.0.0');
  });

  it('gives a demo command for your own servers that uses the ports the file publishes', () => {
    const lines = chaosDoc.split('\n');
    let at = lines.findIndex((line) => line.includes('npm run demo -- --redis '));
    expect(at).toBeGreaterThanOrEqual(0);
    let command = lines[at] as string;
    while (command.endsWith('\\')) command = `${command.slice(0, -1)} ${lines[++at] ?? ''}`;
    const flag = (name: string) => new RegExp(`--${name} (\\S+)`).exec(command)?.[1];
    const env = documentedExternalEnv();
    expect(flag('redis')).toBe(env['REDIS_URL']);
    expect(flag('toxiproxy')).toBe(env['TOXIPROXY_URL']);
    expect(flag('redis-upstream')).toBe(env['CHAOS_REDIS_UPSTREAM']);
    expect(/CHAOS_PROXY_PORTS=(\S+)/.exec(command)?.[1]).toBe(env['CHAOS_PROXY_PORTS']);
  });

  it('matches the command the external backend prints when it is not configured', () => {
    let message = '';
    try {
      resolveExternalSettings({});
    } catch (error) {
      message = (error as Error).message;
    }
    const command = /`(CHAOS_BACKEND=external [^`]+)`/.exec(message)?.[1];
    expect(command).toBeDefined();
    const env = documentedExternalEnv();
    for (const [name, value] of Object.entries(env)) expect(command).toContain(`${name}=${value}`);
    // And the comment at the top of the compose file gives the same command.
    const header = readFileSync(new URL('../../docker-compose.yml', import.meta.url), 'utf8');
    for (const [name, value] of Object.entries(env)) expect(header).toContain(`${name}=${value}`);
  });
});
