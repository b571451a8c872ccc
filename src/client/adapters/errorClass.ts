/**
 * Whether `error` is an instance of a class named `name` (or of a subclass): how the adapters tell a
 * client's error classes apart without loading the client's package.
 */
export function isA(error: unknown, name: string): boolean {
  for (
    let p = typeof error === 'object' && error !== null ? Object.getPrototypeOf(error) : null;
    p !== null;
    p = Object.getPrototypeOf(p)
  ) {
    if ((p as { constructor?: { name?: string } }).constructor?.name === name) return true;
  }
  return false;
}
