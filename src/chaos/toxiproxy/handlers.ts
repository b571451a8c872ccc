/** The API's handlers, one per route: what each answers, in Toxiproxy's status codes. */
import type { ProxyCollection } from './collection.ts';
import { proxyNotFound, toxicNotFound } from './errors.ts';
import type { Proxy } from './proxy.ts';
import { jsonReply, noContent, type Reply } from './reply.ts';
import { parsePopulate, parseProxyCreate, parseProxyUpdate, parseToxicCreate, parseToxicUpdate } from './requests.ts';
import { toxicJson, type ActiveToxic } from './toxic.ts';

/** The Toxiproxy release whose behaviour this server reproduces. */
export const VERSION = '2.12.0';

/** One API request, routed. */
export interface ApiRequest {
  /** Path variables: `proxy`, `toxic`. */
  readonly params: Readonly<Record<string, string>>;
  readonly body: string;
  readonly proxies: ProxyCollection;
}

/** A route's handler; a thrown error becomes its error reply. */
export type Handler = (request: ApiRequest) => Reply | Promise<Reply>;

/** `GET /version`: `{"version":"2.12.0"}`. */
export const version: Handler = () => jsonReply({ version: VERSION });

/** `POST /reset`: every proxy enabled again, every toxic removed. */
export const resetState: Handler = async ({ proxies }) => {
  await proxies.reset();
  return noContent();
};

/** `GET /proxies`: an object keyed by proxy name, in name order. */
export const proxyIndex: Handler = ({ proxies }) => jsonReply(Object.fromEntries(proxies.list().map((proxy) => [proxy.name, proxy])));

/** `POST /proxies`: 201 and the proxy, bound. */
export const proxyCreate: Handler = async ({ body, proxies }) => jsonReply(await proxies.add(parseProxyCreate(body)), 201);

/** `POST /populate` (toxiproxy-node-client's `populate()`): 201 `{"proxies":[…]}`, the proxies as applied. */
export const populate: Handler = async ({ body, proxies }) => jsonReply({ proxies: await proxies.populate(parsePopulate(body)) }, 201);

/** `GET /proxies/{proxy}`. */
export const proxyShow: Handler = (request) => jsonReply(proxyOf(request));

/** `POST /proxies/{proxy}`: fields left out keep their values. */
export const proxyUpdate: Handler = async (request) => {
  const proxy = proxyOf(request);
  await proxy.update(parseProxyUpdate(request.body, proxy));
  return jsonReply(proxy);
};

/** `DELETE /proxies/{proxy}`: 204, its connections closed. */
export const proxyDelete: Handler = async ({ params, proxies }) => {
  if (!(await proxies.remove(params['proxy'] ?? ''))) throw proxyNotFound();
  return noContent();
};

/** `POST /proxies/{proxy}/toxics`: 200 (not 201) and the toxic, defaults filled in. */
export const toxicCreate: Handler = async (request) => {
  const { toxics } = proxyOf(request);
  const toxic = parseToxicCreate(request.body, (name) => toxics.find(name) !== undefined);
  await toxics.add(toxic);
  return jsonReply(toxicJson(toxic));
};

/** `GET /proxies/{proxy}/toxics/{toxic}`. */
export const toxicShow: Handler = (request) => jsonReply(toxicJson(toxicOf(request)));

/** `POST /proxies/{proxy}/toxics/{toxic}`: attributes merge, toxicity kept unless given. */
export const toxicUpdate: Handler = async (request) => {
  const updated = parseToxicUpdate(request.body, toxicOf(request));
  await proxyOf(request).toxics.update(updated);
  return jsonReply(toxicJson(updated));
};

/** `DELETE /proxies/{proxy}/toxics/{toxic}`: 204, what it held flushed onward. */
export const toxicDelete: Handler = async (request) => {
  if (!(await proxyOf(request).toxics.remove(request.params['toxic'] ?? ''))) throw toxicNotFound();
  return noContent();
};

function proxyOf({ params, proxies }: ApiRequest): Proxy {
  const proxy = proxies.get(params['proxy'] ?? '');
  if (!proxy) throw proxyNotFound();
  return proxy;
}

function toxicOf(request: ApiRequest): ActiveToxic {
  const toxic = proxyOf(request).toxics.find(request.params['toxic'] ?? '');
  if (!toxic) throw toxicNotFound();
  return toxic;
}
