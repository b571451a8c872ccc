import { loadScript } from './script.js';

/** `lua/block.lua`: blocks a key for a time, or lifts its block (KEYS, ARGV and the reply in its header). */
export const blockScript = loadScript('block');

/** The arguments of a block of `ms` (0 lifts it): `nowArg` the window's clock injected, or '' (Redis's). */
export function blockArgs(nowArg: number | '', ms: number): (string | number)[] {
  return [nowArg, ms];
}

/** When the block ends, ms on the window's clock (0 when lifted). */
export function readBlock(reply: unknown): number {
  return Number(reply);
}
