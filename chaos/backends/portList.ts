/** `CHAOS_PROXY_PORTS`: the ports proxies may listen on, as a list and/or ranges. */

/**
 * Parses `26379-26390`, `26379,26380` or a mix (`26379-26381,26400`) into distinct ports, in the
 * order given. Blanks around items are ignored.
 * @param variable the variable's name, for the message.
 * @throws Error naming the variable, the expected shape and the value given.
 */
export function parsePortList(value: string, variable = 'CHAOS_PROXY_PORTS'): readonly number[] {
  const invalid = (why: string): Error =>
    new Error(
      `Expected \`${variable}\` to be ports from 1 to 65535 as a list or ranges (e.g. 26379-26390 or 26379,26380), ${why}, got \`${value}\``,
    );
  const ports = new Set<number>();
  for (const item of value.split(',').map((s) => s.trim())) {
    const match = /^(\d+)(?:\s*-\s*(\d+))?$/.exec(item);
    if (!match) throw invalid(`but \`${item}\` is neither a port nor a range`);
    const low = Number(match[1]);
    const high = match[2] === undefined ? low : Number(match[2]);
    if (low < 1 || high > 65535) throw invalid(`but \`${item}\` is out of range`);
    if (low > high) throw invalid(`but the range \`${item}\` runs backwards`);
    for (let port = low; port <= high; port++) ports.add(port);
  }
  return Object.freeze([...ports]);
}
