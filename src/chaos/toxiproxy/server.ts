/** The HTTP API server: routes each request to its handler and sends the reply. */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { ProxyCollection } from './collection.ts';
import { routeNotFound } from './errors.ts';
import { errorReply, type Reply } from './reply.ts';
import { matchRoute } from './routes.ts';

/** The API on `proxies`: Toxiproxy's paths, status codes and JSON bodies (README: "The API"). */
export function createApiServer(proxies: ProxyCollection): Server {
  return createServer((request, response) => {
    void answer(request, proxies).then((reply) => send(response, reply));
  });
}

async function answer(request: IncomingMessage, proxies: ProxyCollection): Promise<Reply> {
  try {
    const match = matchRoute(request.method ?? 'GET', (request.url ?? '/').split('?')[0] ?? '/');
    if (!match) throw routeNotFound();
    return await match.handler({ params: match.params, body: await readBody(request), proxies });
  } catch (error) {
    return errorReply(error);
  }
}

function send(response: ServerResponse, reply: Reply): void {
  response.statusCode = reply.status;
  for (const [name, value] of Object.entries(reply.headers)) response.setHeader(name, value);
  if (reply.status !== 204) response.setHeader('Content-Length', Buffer.byteLength(reply.body));
  response.end(reply.status === 204 ? undefined : reply.body);
}

function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.on('error', reject);
  });
}
