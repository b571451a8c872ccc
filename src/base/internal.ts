/**
 * Symbols for the methods the tiers offer to `ResilientLimiter` only: they skip the argument checks
 * that the limiter has already made. Not exported from the package root.
 */
export const decide = Symbol('resilimit.decide');
export const configure = Symbol('resilimit.configure');
export const decideBatch = Symbol('resilimit.decideBatch');
export const inspect = Symbol('resilimit.inspect');
export const block = Symbol('resilimit.block');
export const refundCalls = Symbol('resilimit.refundCalls');
export const takeLease = Symbol('resilimit.takeLease');
export const giveLease = Symbol('resilimit.giveLease');
export const charge = Symbol('resilimit.charge');
