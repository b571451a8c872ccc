import { lookup } from 'node:dns/promises';
import { isIP, type AddressInfo, type Server } from 'node:net';

/** A `host:port` address, split like Go's `net.SplitHostPort` (`[::1]:80`, `:80`, `redis:6379`). */
export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** Go's words for the listen errors a proxy can meet (`listen tcp 127.0.0.1:80: bind: …`). */
const BIND_ERRORS: Readonly<Record<string, string>> = {
  EADDRINUSE: 'address already in use',
  EACCES: 'permission denied',
  EADDRNOTAVAIL: 'cannot assign requested address',
};

/**
 * Splits `address` into host and port. An empty port is port 0, as in Go.
 * @throws Error worded like Go's (`address redis: missing port in address`).
 */
export function splitHostPort(address: string): HostPort {
  let host: string;
  let port: string;
  if (address.startsWith('[')) {
    const close = address.indexOf(']');
    if (close < 0) throw new Error(`address ${address}: missing ']' in address`);
    if (address[close + 1] !== ':') throw new Error(`address ${address}: missing port in address`);
    [host, port] = [address.slice(1, close), address.slice(close + 2)];
  } else {
    const colon = address.lastIndexOf(':');
    if (colon < 0) throw new Error(`address ${address}: missing port in address`);
    [host, port] = [address.slice(0, colon), address.slice(colon + 1)];
    if (host.includes(':')) throw new Error(`address ${address}: too many colons in address`);
  }
  if (port !== '' && !/^\d+$/.test(port)) throw new Error(`lookup tcp/${port}: unknown port`);
  const number = Number(port);
  if (number > 65535) throw new Error(`address ${address}: invalid port`);
  return { host, port: number };
}

/** `host:port`, with brackets around an IPv6 host (`[::]:8474`), as Go's `net.JoinHostPort`. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Binds `server` to `listen` and returns the address it got (port 0 resolved), as Toxiproxy
 * reports it. A wildcard host (empty, `0.0.0.0` or `::`) binds the dual-stack `[::]` as Go does; a
 * host name binds its first IPv4 address, as Go prefers.
 * @throws Error with Go's wording, answered as a 500 by the API.
 */
export async function listenOn(server: Server, listen: string): Promise<string> {
  let target: HostPort;
  try {
    target = splitHostPort(listen);
  } catch (error) {
    throw new Error(`listen tcp: ${(error as Error).message}`);
  }
  const host = await resolveHost(target.host);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host, port: target.port }, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? '';
    const reason = BIND_ERRORS[code] ?? (error as Error).message;
    throw new Error(`listen tcp ${joinHostPort(host ?? '', target.port)}: bind: ${reason}`);
  }
  const bound = server.address() as AddressInfo;
  return joinHostPort(bound.address, bound.port);
}

/**
 * `listen` with its host resolved the way {@link listenOn} would bind it, or undefined if it does not
 * resolve: `/populate` keeps a proxy whose listen address is unchanged in this sense.
 */
export async function resolveListen(listen: string): Promise<string | undefined> {
  try {
    const { host, port } = splitHostPort(listen);
    return joinHostPort((await resolveHost(host)) ?? '::', port);
  } catch {
    return undefined;
  }
}

/** The IP to bind for `host`; undefined for a wildcard (Node then binds the dual-stack `::`). */
async function resolveHost(host: string): Promise<string | undefined> {
  if (host === '' || host === '0.0.0.0' || host === '::') return undefined;
  if (isIP(host)) return host;
  try {
    return (await lookup(host, { family: 4 })).address;
  } catch {
    try {
      return (await lookup(host)).address;
    } catch {
      throw new Error(`listen tcp: lookup ${host}: no such host`);
    }
  }
}
