import type { Cluster, Redis } from 'ioredis';

/** `promise`, or a rejection once `ms` have passed (the timer is unref'd and cleared). */
export function withDeadline<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    timer.unref();
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** A client listener, as ioredis types them (`any` arguments). */
// biome-ignore lint/suspicious/noExplicitAny: ioredis types its listeners' arguments as any
type Listener = (...args: any[]) => void;

/**
 * Adds a listener to the user's client and raises its listener cap by one: each limiter adds its own
 * listener, so that many limiters on one client are not a leak warning (an unlimited cap stays unlimited).
 */
export function listen(client: Redis | Cluster, event: string, listener: Listener): void {
  const max = client.getMaxListeners();
  if (max !== 0) client.setMaxListeners(max + 1);
  client.on(event, listener);
}

/** Undoes {@link listen}. */
export function unlisten(client: Redis | Cluster, event: string, listener: Listener): void {
  if (client.listeners(event).includes(listener)) {
    client.off(event, listener);
    const max = client.getMaxListeners();
    if (max !== 0) client.setMaxListeners(Math.max(max - 1, 1));
  }
}
