import { invalidOption } from '../base/errors.js';

/** A name the heartbeat set can hold: its members' marks (`lua/heartbeat.lua`) never start one. */
const NAME = /^[^!\-~#=@\s]\S{0,127}$/u;

/** `local.name`, checked; undefined when absent (each process goes by a unique id). */
export function instanceName(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !NAME.test(value)) {
    throw invalidOption('local.name', '1 to 128 characters without white space, not starting with !, -, ~, #, = or @', value);
  }
  return value;
}
