import type { A } from './a.js';
export type B = { a?: A };
