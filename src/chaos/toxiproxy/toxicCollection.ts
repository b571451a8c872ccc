import type { Socket } from 'node:net';
import { toxicAlreadyExists } from './errors.ts';
import { Link } from './link.ts';
import { Mutex } from './mutex.ts';
import type { Prng } from './prng.ts';
import { DIRECTIONS, type ActiveToxic, type Direction } from './toxic.ts';

/**
 * A proxy's toxics (one ordered chain per direction) and the live links they act on
 * (Toxiproxy's `ToxicCollection`).
 *
 * Invariant: every live link of a direction holds that direction's chain, in order. Changes are
 * made to the chain first, then to every live link of its direction, and one change finishes
 * everywhere before the next begins; a link that starts meanwhile copies the chain as it then is.
 */
export class ToxicCollection {
  readonly #chains: Record<Direction, ActiveToxic[]> = { upstream: [], downstream: [] };
  readonly #links = new Set<Link>();
  readonly #lock = new Mutex();
  readonly #random: Prng;

  constructor(random: Prng) {
    this.#random = random;
  }

  /** Every toxic, upstream ones first, each direction in insertion order. */
  list(): ActiveToxic[] {
    return DIRECTIONS.flatMap((direction) => this.#chains[direction]);
  }

  /** The toxic called `name` in either direction. */
  find(name: string): ActiveToxic | undefined {
    return this.list().find((toxic) => toxic.name === name);
  }

  /** Whether a toxic of this type exists in either direction. */
  hasType(type: string): boolean {
    return this.list().some((toxic) => toxic.kind.type === type);
  }

  /**
   * Appends `toxic` to its direction's chain and to every live link of that direction.
   * @throws ApiError 409 if its name is taken in either direction.
   */
  add(toxic: ActiveToxic): Promise<void> {
    return this.#lock.run(async () => {
      if (this.find(toxic.name)) throw toxicAlreadyExists();
      this.#chains[toxic.direction].push(toxic);
      await this.#eachLink(toxic.direction, (link) => link.addToxic(toxic));
    });
  }

  /** Replaces the toxic of the same name, restarting it on every live link. */
  update(toxic: ActiveToxic): Promise<void> {
    return this.#lock.run(async () => {
      const chain = this.#chains[toxic.direction];
      const index = chain.findIndex((t) => t.name === toxic.name);
      if (index < 0) return;
      chain[index] = toxic;
      await this.#eachLink(toxic.direction, (link) => link.updateToxic(toxic));
    });
  }

  /** Removes the toxic called `name`; false if there is none. */
  remove(name: string): Promise<boolean> {
    return this.#lock.run(async () => {
      const toxic = this.find(name);
      if (!toxic) return false;
      await this.#remove(toxic);
      return true;
    });
  }

  /** Removes every toxic, each with the side effects of its removal. */
  reset(): Promise<void> {
    return this.#lock.run(async () => {
      for (const toxic of this.list()) await this.#remove(toxic);
    });
  }

  /**
   * Starts a link of `direction` from `source` to `destination` with the current chain.
   * @param onEnd called when the stream's end leaves the link; the link is then forgotten.
   */
  startLink(direction: Direction, source: Socket, destination: Socket, onEnd: () => void): Link {
    const link: Link = new Link({
      direction,
      chain: this.#chains[direction],
      source,
      destination,
      random: this.#random,
      onEnd: () => {
        this.#links.delete(link);
        onEnd();
      },
    });
    this.#links.add(link);
    link.start();
    return link;
  }

  async #remove(toxic: ActiveToxic): Promise<void> {
    const chain = this.#chains[toxic.direction];
    chain.splice(chain.indexOf(toxic), 1);
    await this.#eachLink(toxic.direction, (link) => link.removeToxic(toxic));
  }

  async #eachLink(direction: Direction, change: (link: Link) => Promise<void>): Promise<void> {
    for (const link of this.#links) if (link.disposed) this.#links.delete(link); // its stream never ended
    const links = [...this.#links].filter((link) => link.direction === direction);
    await Promise.all(links.map(change));
  }
}
