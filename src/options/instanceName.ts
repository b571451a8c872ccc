import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { invalidOption } from './errors.js';

/** A name the heartbeat set can hold: its members' marks (`lua/heartbeat.lua`) never start one. */
const NAME = /^[^!\-~#=@\s]\S{0,127}$/u;

/** `local.name`: checked, or the host name when absent (a unique id when the host has none that fits). */
export function instanceName(value: unknown): string {
  if (value === undefined) {
    const host = hostname();
    return NAME.test(host) ? host : `instance-${randomBytes(8).toString('hex')}`;
  }
  if (typeof value !== 'string' || !NAME.test(value)) {
    throw invalidOption('local.name', '1 to 128 characters without white space, not starting with !, -, ~, #, = or @', value);
  }
  return value;
}
