/** Requests to a test server and the reading of the RateLimit fields, for the HTTP middleware tests of every framework. */
import { request as httpRequest } from 'node:http';
import { expect } from 'vitest';

/** A served app: where to send requests. */
export type Served = { readonly url: string };

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
