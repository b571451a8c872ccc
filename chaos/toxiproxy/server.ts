import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { ProxyCollection } from './collection.ts';
import { errorReply, plainError, type Reply } from './reply.ts';
import { matchRoute } from './routes.ts';

/**
 * The HTTP API, answering as Toxiproxy 2.12 does: same paths, status codes, bodies and content
 * types, including its quirks (an unknown path is Go's plain `404 page not found`, a wrong method an
 * empty 405, browsers are refused with a 403).
 */
export function createApiServer(proxies: ProxyCollection): Server {
  return createServer((request, response) => {
    void answer(request, proxies).then((reply) => send(response, reply));
  });
}

async function answer(request: IncomingMessage, proxies: ProxyCollection): Promise<Reply> {
  const match = matchRoute(request.method ?? 'GET', decodedPath(request.url ?? '/'));
  // gorilla/mux answers these itself, without Toxiproxy's middlewares (no request id, no browser check).
  if (match.kind === 'not-found') return plainError('404 page not found', 404);
  if (match.kind === 'method-not-allowed') return { status: 405, body: '', headers: {} };
  const headers = { 'X-Toxiproxy-Request-Id': requestId() };
  // Toxiproxy refuses browsers, so that a web page cannot drive it.
  if (request.headers['user-agent']?.startsWith('Mozilla/')) return withHeaders(plainError('User agent not allowed', 403), headers);
  try {
    return withHeaders(await match.handler({ params: match.params, body: await readBody(request), proxies }), headers);
  } catch (error) {
    return withHeaders(errorReply(error), headers);
  }
}

function withHeaders(reply: Reply, headers: Readonly<Record<string, string>>): Reply {
  return { ...reply, headers: { ...headers, ...reply.headers } };
}

function send(response: ServerResponse, reply: Reply): void {
  response.statusCode = reply.status;
  for (const [name, value] of Object.entries(reply.headers)) response.setHeader(name, value);
  if (reply.status !== 204) response.setHeader('Content-Length', Buffer.byteLength(reply.body));
  response.end(reply.status === 204 ? undefined : reply.body);
}

/** The URL's path, percent-decoded as Go's router sees it (`a%2Fb` is two segments there too). */
function decodedPath(url: string): string {
  const path = url.split('?')[0] ?? '/';
  try {
    return decodeURIComponent(path);
  } catch {
    return path;
  }
}

function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.on('error', reject);
  });
}

/** 20 characters of base32hex, the shape of the xid Toxiproxy puts in `X-Toxiproxy-Request-Id`. */
function requestId(): string {
  return [...randomBytes(20)].map((byte) => '0123456789abcdefghijklmnopqrstuv'[byte % 32]).join('');
}
