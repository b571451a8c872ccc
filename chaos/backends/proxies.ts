/** Creating a proxy by name, replacing any proxy of that name, through toxiproxy-node-client. */
import type { Proxy, Toxiproxy } from 'toxiproxy-node-client';
import { splitHostPort, type HostPort } from '../../src/chaos/toxiproxy/address.ts';

/** Deletes the proxy named `name` if the server has one. Returns the proxies that remain, by name. */
export async function removeProxyIfPresent(toxiproxy: Toxiproxy, name: string): Promise<Record<string, Proxy>> {
  const { [name]: existing, ...others } = await toxiproxy.getAll();
  await existing?.remove();
  return others;
}

/**
 * Creates the proxy `{ name, listen, upstream }`, deleting a proxy of the same name first
 * (toxiproxy answers 409 to a second proxy of a name).
 */
export async function replaceProxy(
  toxiproxy: Toxiproxy,
  body: { readonly name: string; readonly listen: string; readonly upstream: string },
): Promise<Proxy> {
  await removeProxyIfPresent(toxiproxy, body.name);
  return toxiproxy.createProxy({ ...body });
}

/** The host and port a proxy actually listens on (`127.0.0.1:41234`, `[::]:26379`), port 0 resolved. */
export function listenAddress(proxy: Proxy): HostPort {
  const address = splitHostPort(proxy.listen);
  if (address.port === 0) throw new Error(`proxy ${proxy.name} reports listen ${proxy.listen}, without its bound port`);
  return address;
}
