/** Lets pending promise callbacks run: `n` turns of the microtask queue. */
export async function ticks(n = 10): Promise<void> {
  for (let i = 0; i < n; i++) await Promise.resolve();
}
