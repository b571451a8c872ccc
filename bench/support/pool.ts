/** Runs `count` async tasks with at most `concurrency` in flight. */
export async function pool(count: number, concurrency: number, task: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < count) await task(next++);
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
}
