/**
 * `host:port` addresses, as the API, the backends and the demo write them (`127.0.0.1:8474`,
 * `[::1]:6379`, `redis:6379`, `:0`), and binding a proxy's listener to one.
 */
import type { AddressInfo, Server } from 'node:net';

/** An address split into its host (without brackets) and port. */
export interface HostPort {
  readonly host: string;
  readonly port: number;
}

const HOST_PORT = /^(?:\[([^\]]*)\]|([^:[\]]*)):(\d*)$/;

/**
 * Splits `address` into host and port; an empty host or port stays empty or 0 (`:0` is any
 * address, an OS-assigned port).
 * @throws Error for anything but `host:port` or `[ipv6]:port` with a port up to 65535.
 */
export function splitHostPort(address: string): HostPort {
  const match = HOST_PORT.exec(address);
  const port = Number(match?.[3] || 0);
  if (!match || port > 65535) throw new Error(`Expected host:port (e.g. 127.0.0.1:6379), got \`${address}\``);
  return { host: match[1] ?? match[2] ?? '', port };
}

/** `host:port`, with brackets around an IPv6 host (`[::1]:8474`). */
export function joinHostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/**
 * Binds `server` to `listen` and returns the address it got, port 0 resolved: what the API reports
 * as the proxy's `listen`. An empty host binds every address.
 * @throws Error saying which address could not be bound and why (the API answers it as a 500).
 */
export async function listenOn(server: Server, listen: string): Promise<string> {
  try {
    const { host, port } = splitHostPort(listen);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: host === '' ? undefined : host, port }, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (error) {
    throw new Error(`listen ${listen}: ${(error as Error).message}`, { cause: error });
  }
  const bound = server.address() as AddressInfo;
  return joinHostPort(bound.address, bound.port);
}
