import { exactLog } from './exactLog.js';
import { slices } from './slices.js';
import type { WindowModel } from './WindowModel.js';

/**
 * The one place where the counting model is chosen, at construction: slices of `resolutionMs` when it
 * is given (a number: `'auto'` was resolved by the options), else the exact log.
 */
export function windowModel(options: { readonly windowMs: number; readonly resolutionMs: number | undefined }): WindowModel {
  return options.resolutionMs === undefined ? exactLog : slices(options.resolutionMs, options.windowMs);
}
