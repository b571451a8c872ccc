/**
 * The HTTP middleware tests of every framework: a served test app, requests to it, and the reading
 * of the RateLimit fields.
 */
import { once } from 'node:events';
import { request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'vitest';

/** A served app: where to send requests. */
export type Served = { readonly url: string };

/** A test app, served: its handler counts its runs. */
export interface App {
  readonly url: string;
  /** Times the route handler ran. */
  handled: number;
  close(): Promise<void>;
}

/** `app` served by `server` on loopback (once it listens; `listen` it on port 0 first), closed with every connection. */
export async function served(server: Server, app: { handled: number }): Promise<App> {
  if (!server.listening) await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return Object.assign(app, {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  });
}

/** The default 429 body: RFC 9457 problem details of the draft's quota-exceeded type. */
export const QUOTA_EXCEEDED = {
  type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
  title: 'Request cannot be satisfied as assigned quota has been exceeded',
  status: 429,
};

/** The 503 body with `reducedCapacity: 'temporary-reduced-capacity'`: the draft's type of that name (section 5.2). */
export const TEMPORARY_REDUCED_CAPACITY = {
  type: 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity',
  title: 'Request cannot be satisfied due to temporary server capacity constraints',
  status: 503,
};

/** The test apps' error handler's body: the error's code and message. */
export function errorBody(error: unknown): string {
  const e = error as { code?: string; message?: string };
  return JSON.stringify({ code: e.code ?? null, message: e.message ?? String(error) });
}

/** What the test apps' route answers: `/status/<code>` that status, `/hang` nothing until the client gives up, anything else 200. */
export function outcomeOf(path: string | undefined): number | 'hang' {
  if (path?.startsWith('/hang') === true) return 'hang';
  const code = /^\/status\/(\d{3})/.exec(path ?? '')?.[1];
  return code === undefined ? 200 : Number(code);
}

export type Reply = { status: number; headers: Headers; body: string };

export async function get(app: Served, path = '/', headers: Record<string, string> = {}): Promise<Reply> {
  const response = await fetch(`${app.url}${path}`, { headers });
  return { status: response.status, headers: response.headers, body: await response.text() };
}

/** `n` GETs one after the other. */
export async function sequence(app: Served, n: number, path = '/', headers: Record<string, string> = {}): Promise<Reply[]> {
  const out: Reply[] = [];
  for (let i = 0; i < n; i += 1) out.push(await get(app, path, headers));
  return out;
}

/** A GET from a given loopback source address (fetch cannot choose it). */
export function getFrom(app: Served, localAddress: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${app.url}/`, { localAddress, agent: false, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        const fields = new Headers();
        for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') fields.set(name, value);
        resolve({ status: res.statusCode ?? 0, headers: fields, body });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/** The items of a RateLimit or RateLimit-Policy field without `pk`: `"name";k=v;k=v, "name";…`. */
export function items(field: string | null): { name: string; params: Record<string, number> }[] {
  expect(field, 'the field is present').not.toBeNull();
  return (field as string).split(/\s*,\s*/).map((part) => {
    const match = /^"([^"]*)"((?:;[a-z]+=\d+)+)$/.exec(part);
    expect(match, `a well-formed item: ${part}`).not.toBeNull();
    const [, name, rest] = match as RegExpExecArray;
    const params = Object.fromEntries(
      (rest as string)
        .slice(1)
        .split(';')
        .map((p) => {
          const [k, v] = p.split('=');
          return [k as string, Number(v)];
        }),
    );
    return { name: name as string, params };
  });
}

/** The single item of a RateLimit / RateLimit-Policy field, checked to be named `name`. */
export function item(field: string | null, name = 'default'): Record<string, number> {
  const all = items(field);
  expect(all).toHaveLength(1);
  expect(all[0]?.name).toBe(name);
  return all[0]?.params as Record<string, number>;
}
