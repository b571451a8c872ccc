/**
 * A request sent as raw bytes, as an attacker sends it: `fetch` would normalise the target (drop the
 * fragment, resolve dot segments, turn an absolute form into a path) before the server sees it.
 */
import { connect } from 'node:net';

/** The status of the answer to `<method> <target> HTTP/1.1` sent to `url`'s port on loopback, or 0 if the server closed without one. */
export function rawRequest(url: string, method: string, target: string, headers: Record<string, string> = {}): Promise<number> {
  const { port } = new URL(url);
  const lines = [`${method} ${target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close'];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1');
    let answer = '';
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => {
      answer += chunk;
    });
    socket.on('error', reject);
    socket.on('close', () => resolve(Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0)));
    // Not `end()`: a server may drop a half-closed connection before it answers. `Connection: close` ends it.
    socket.write(`${lines.join('\r\n')}\r\n\r\n`);
  });
}
