/**
 * The live display, at most 80 columns. On a terminal: a compact block redrawn once a second (ANSI),
 * with the run's events scrolling above it. Elsewhere (a pipe, a CI log): one plain line per second,
 * and one line per event. The formatting functions are pure, so tests read them without a terminal.
 */
import type { BreakerState } from '../../src/index.ts';
import { formatMs } from '../../chaos/format.ts';
import type { DemoMode } from './options.ts';
import type { SecondFigures } from './record.ts';
import type { RunView } from './run.ts';
import type { DemoPhase, PhaseName } from './script.ts';

/** What the display needs to know about the run. */
export type ViewSettings = {
  readonly instances: number;
  readonly limit: number;
  readonly mode: DemoMode;
  readonly durationS: number;
  readonly phases: readonly DemoPhase[];
};

/** The run's display, plus free lines before and after the run. */
export interface LiveView extends RunView {
  /** Text of its own (setup, summary), wrapped at 80 columns. */
  log(text: string): void;
  /** The run is over: leave the last block in place and restore the cursor. */
  finish(): void;
}

export const WIDTH = 80;
const LETTERS: Readonly<Record<BreakerState, string>> = { closed: 'C', open: 'O', 'half-open': 'H' };
/** What the fallback column holds, by mode. */
const FALLBACK_NAMES: Readonly<Record<DemoMode, string>> = {
  local: 'local window',
  'fail-open': 'fail-open',
  'fail-closed': 'fail-closed',
};
const FALLBACK_EFFECT: Readonly<Record<DemoMode, string>> = {
  local: 'the local window answers',
  'fail-open': 'every call is allowed',
  'fail-closed': 'every call is denied',
};

// ---------------------------------------------------------------------------------------------------
// Pure formatting

/** `admitted` against `limit` in 15 cells: 10 up to the limit, `|`, then up to 4 over it (`»`: more). */
export function limitBar(admitted: number, limit: number, cells = 10, overCells = 4): string {
  const filled = Math.min(cells, Math.round((admitted / limit) * cells));
  const over = admitted > limit ? Math.max(1, Math.round(((admitted - limit) / limit) * cells)) : 0;
  const overflow = over > overCells ? `${'█'.repeat(overCells - 1)}»` : '█'.repeat(over).padEnd(overCells, ' ');
  return `${'█'.repeat(filled)}${'·'.repeat(cells - filled)}|${overflow}`;
}

/** Each instance's breaker as a letter (C/O/H), or counts (`C14O2`) beyond 8 instances. */
export function breakerLetters(states: readonly BreakerState[]): string {
  if (states.length <= 8) return states.map((s) => LETTERS[s]).join('');
  const count = (state: BreakerState): number => states.filter((s) => s === state).length;
  return (['closed', 'open', 'half-open'] as const).map((s) => (count(s) > 0 ? `${LETTERS[s]}${count(s)}` : '')).join('');
}

const COLUMNS = [
  { head: 'time', width: 5, right: true },
  { head: 'phase', width: 7, right: false },
  { head: 'admitted/s vs limit', width: 20, right: false },
  { head: 'redis', width: 5, right: true },
  { head: 'fallback', width: 8, right: true },
  { head: 'deny', width: 5, right: true },
  { head: 'breakers', width: 8, right: false },
  { head: 'p50 ms', width: 6, right: true },
  { head: 'p99 ms', width: 6, right: true },
] as const;

function columns(cells: readonly string[]): string {
  return COLUMNS.map((c, i) => {
    const cell = cells[i] ?? '';
    return c.right ? cell.padStart(c.width) : cell.padEnd(c.width);
  })
    .join(' ')
    .trimEnd();
}

/**
 * `text` in lines of at most `width` characters, broken at spaces; lines after the first of a
 * paragraph start with `indent`. Newlines in `text` start new paragraphs (their own indentation kept).
 */
export function wrap(text: string, width = WIDTH, indent = '    '): string[] {
  const lines: string[] = [];
  for (const paragraph of text.split('\n')) {
    let line = '';
    for (const word of paragraph.split(/(?<=\S)(?= )/)) {
      if (line !== '' && line.length + word.length > width) {
        lines.push(line);
        line = indent + word.trimStart();
      } else {
        line += word;
      }
    }
    lines.push(line);
  }
  return lines;
}

/**
 * The header over the plain lines, two lines: the second names the columns; the first says what the
 * columns `redis`, `fallback` and `deny` count: decisions, admitted or refused, by who made them.
 */
export function plainHeader(): string[] {
  const before = COLUMNS.slice(0, 3).reduce((n, c) => n + c.width + 1, 0);
  return [`${' '.repeat(before)}decisions (admitted or refused) by`, columns(COLUMNS.map((c) => c.head))];
}

/**
 * One plain line per second: time (end of the second), phase, admitted with its bar, decisions by
 * Redis / the fallback / the deny cache (admitted or refused), breakers, p50 and p99 latency. Starts with the time.
 */
export function plainLine(f: SecondFigures, limit: number): string {
  return columns([
    `${f.second + 1}s`,
    f.phase,
    `${String(f.admitted).padStart(4)} ${limitBar(f.admitted, limit)}`,
    String(f.redis),
    String(f.fallback),
    String(f.denyCache),
    breakerLetters(f.breakers),
    formatMs(f.latencyMs.p50),
    formatMs(f.latencyMs.p99),
  ]);
}

/** An event line: `» 12.0 s  text`. */
export function eventLine(atMs: number, text: string): string {
  return `» ${(atMs / 1000).toFixed(1).padStart(5)} s  ${text}`;
}

/** A breaker event worth a line: opening from closed, or closing. */
type BreakerEvent = { readonly atMs: number; readonly kind: 'opened' | 'closed'; readonly instances: number[] };

/** The text of a breaker event, e.g. `breakers #0, #2 opened: the local window answers`. */
export function breakerEventText(kind: 'opened' | 'closed', instances: readonly number[], mode: DemoMode): string {
  const sorted = [...instances].sort((a, b) => a - b);
  const who =
    sorted.length === 1
      ? `breaker #${sorted[0]}`
      : sorted.length <= 6
        ? `breakers ${sorted.map((i) => `#${i}`).join(', ')}`
        : `${sorted.length} breakers`;
  return `${who} ${kind}: ${kind === 'opened' ? FALLBACK_EFFECT[mode] : 'Redis decides again'}`;
}

/**
 * Breaker events, merged when the same kind follows within 250 ms (instances often open together),
 * so that 16 instances do not print 16 lines. A merged event is printed when something else is.
 */
class BreakerEvents {
  readonly #mode: DemoMode;
  #pending: BreakerEvent | undefined;

  constructor(mode: DemoMode) {
    this.#mode = mode;
  }

  /** Adds a transition; returns the line of the event it could not join, if any. */
  add(instance: number, state: BreakerState, previous: BreakerState, atMs: number): string | undefined {
    const kind = state === 'open' && previous === 'closed' ? 'opened' : state === 'closed' ? 'closed' : undefined;
    if (kind === undefined) return undefined;
    const pending = this.#pending;
    if (pending !== undefined && pending.kind === kind && atMs - pending.atMs < 250) {
      pending.instances.push(instance);
      return undefined;
    }
    this.#pending = { atMs, kind, instances: [instance] };
    return pending === undefined ? undefined : this.#line(pending);
  }

  /** The line of the event held back, if any. */
  flush(): string | undefined {
    const pending = this.#pending;
    this.#pending = undefined;
    return pending === undefined ? undefined : this.#line(pending);
  }

  /** Whether the event held back is an opening. */
  get opening(): boolean {
    return this.#pending?.kind === 'opened';
  }

  #line(event: BreakerEvent): string {
    return eventLine(event.atMs, breakerEventText(event.kind, event.instances, this.#mode));
  }
}

const SPARKS = ' ▁▂▃▄▅▆▇█';

/** One character per second, 4/8 high at the limit, full at twice the limit (the offered load). */
export function sparkline(values: readonly number[], limit: number): string {
  return values.map((v) => SPARKS[v <= 0 ? 0 : Math.min(8, Math.max(1, Math.round((v / (2 * limit)) * 8)))]).join('');
}

/** The block shown on a terminal after second `f.second`, without colour. */
export function liveBlock(
  settings: ViewSettings,
  f: SecondFigures | undefined,
  history: readonly number[],
  phase: DemoPhase | undefined,
): string[] {
  const elapsedS = f === undefined ? 0 : f.second + 1;
  const track = 36;
  const done = Math.round((elapsedS / settings.durationS) * track);
  const current = phase ?? settings.phases[0];
  const states = f?.breakers ?? Array.from({ length: settings.instances }, (): BreakerState => 'closed');
  const letters = states.length <= 4 ? states.map((s, i) => `#${i} ${LETTERS[s]}`).join('  ') : breakerLetters(states);
  return [
    `  ${String(elapsedS).padStart(3)} s of ${settings.durationS} s  ${'━'.repeat(done)}${'─'.repeat(track - done)}  ${current?.label ?? ''}`,
    `  admitted/s  ${String(f?.admitted ?? 0).padStart(4)} ${limitBar(f?.admitted ?? 0, settings.limit, 30, 8)} limit ${settings.limit}`,
    `  history     ${sparkline(history.slice(-60), settings.limit)}`,
    `  decided by  redis ${f?.redis ?? 0} · ${FALLBACK_NAMES[settings.mode]} ${f?.fallback ?? 0} · deny cache ${f?.denyCache ?? 0} · of ${f?.decisions ?? 0}`,
    `  breakers    ${letters}    (C closed · O open · H half-open)`,
    `  latency     p50 ${formatMs(f?.latencyMs.p50)} ms · p99 ${formatMs(f?.latencyMs.p99)} ms`,
  ];
}

// ---------------------------------------------------------------------------------------------------
// Views

type Output = { write(text: string): unknown; readonly columns?: number | undefined };

/** A display for `out`: the live block on a terminal, plain lines elsewhere. */
export function createView(
  out: Output & { readonly isTTY?: boolean },
  settings: ViewSettings,
  env: Readonly<Record<string, string | undefined>>,
): LiveView {
  return out.isTTY === true
    ? new TerminalView(out, settings, env['NO_COLOR'] === undefined || env['NO_COLOR'] === '')
    : new PlainView(out, settings);
}

/** One line per second and per event. */
export class PlainView implements LiveView {
  readonly #out: Output;
  readonly #settings: ViewSettings;
  readonly #breakers: BreakerEvents;
  #headed = false;

  constructor(out: Output, settings: ViewSettings) {
    this.#out = out;
    this.#settings = settings;
    this.#breakers = new BreakerEvents(settings.mode);
  }

  log(text: string): void {
    this.#flush();
    this.#write(text);
  }

  phase(phase: DemoPhase, atMs: number): void {
    this.log(eventLine(atMs, phase.description));
  }

  breaker(instance: number, state: BreakerState, previous: BreakerState, atMs: number): void {
    const line = this.#breakers.add(instance, state, previous, atMs);
    if (line !== undefined) this.#write(line);
  }

  second(figures: SecondFigures): void {
    this.#flush();
    if (!this.#headed) {
      this.#headed = true;
      for (const line of plainHeader()) this.#write(line);
    }
    this.#write(plainLine(figures, this.#settings.limit));
  }

  finish(): void {
    this.#flush();
  }

  #flush(): void {
    const line = this.#breakers.flush();
    if (line !== undefined) this.#write(line);
  }

  #write(text: string): void {
    for (const line of wrap(text)) this.#out.write(`${line}\n`);
  }
}

const ANSI = {
  reset: '\x1b[0m',
  bold: '\x1b[1m',
  dim: '\x1b[2m',
  red: '\x1b[31m',
  green: '\x1b[32m',
  yellow: '\x1b[33m',
  hideCursor: '\x1b[?25l',
  showCursor: '\x1b[?25h',
  clearDown: '\x1b[J',
} as const;
const PHASE_COLOURS: Readonly<Record<PhaseName, string>> = { healthy: ANSI.green, slow: ANSI.yellow, down: ANSI.red, back: ANSI.green };

/** Events scroll; under them, the block of the last second is redrawn in place. */
export class TerminalView implements LiveView {
  readonly #out: Output;
  readonly #settings: ViewSettings;
  readonly #colour: boolean;
  readonly #breakers: BreakerEvents;
  readonly #history: number[] = [];
  #drawn = 0;
  #last: SecondFigures | undefined;
  #phase: DemoPhase | undefined;
  readonly #restoreCursor = (): void => void this.#out.write(ANSI.showCursor);

  constructor(out: Output, settings: ViewSettings, colour: boolean) {
    this.#out = out;
    this.#settings = settings;
    this.#colour = colour;
    this.#breakers = new BreakerEvents(settings.mode);
  }

  log(text: string): void {
    this.#flush();
    for (const line of wrap(text, Math.min(WIDTH, this.#out.columns ?? WIDTH))) this.#event(line, undefined);
  }

  phase(phase: DemoPhase, atMs: number): void {
    if (this.#phase === undefined) {
      this.#out.write(ANSI.hideCursor);
      process.once('exit', this.#restoreCursor);
    }
    this.#flush();
    this.#phase = phase;
    this.#event(eventLine(atMs, phase.description), PHASE_COLOURS[phase.name]);
  }

  breaker(instance: number, state: BreakerState, previous: BreakerState, atMs: number): void {
    const opening = this.#breakers.opening;
    const line = this.#breakers.add(instance, state, previous, atMs);
    if (line !== undefined) this.#event(line, opening ? ANSI.red : ANSI.green);
  }

  second(figures: SecondFigures): void {
    this.#flush();
    this.#last = figures;
    this.#history.push(figures.admitted);
    this.#erase();
    this.#draw();
  }

  finish(): void {
    this.#flush();
    if (this.#phase !== undefined) this.#out.write(ANSI.showCursor);
    process.off('exit', this.#restoreCursor);
    this.#drawn = 0; // the last block stays on screen
    this.#phase = undefined;
  }

  #flush(): void {
    const opening = this.#breakers.opening;
    const line = this.#breakers.flush();
    if (line !== undefined) this.#event(line, opening ? ANSI.red : ANSI.green);
  }

  /** A line above the block, which is then drawn again under it. */
  #event(line: string, colour: string | undefined): void {
    this.#erase();
    const fitted = this.#fit(line);
    this.#out.write(`${colour === undefined ? fitted : this.#paint(fitted, colour)}\n`);
    this.#draw();
  }

  #draw(): void {
    if (this.#phase === undefined) return;
    const lines = liveBlock(this.#settings, this.#last, this.#history, this.#phase).map((line) => this.#fit(line));
    const painted = lines.map((line, i) => (i === 0 ? this.#paint(line, PHASE_COLOURS[this.#phase?.name ?? 'healthy']) : line));
    this.#out.write(`${painted.join('\n')}\n`);
    this.#drawn = lines.length;
  }

  #erase(): void {
    if (this.#drawn > 0) this.#out.write(`\r\x1b[${this.#drawn}A${ANSI.clearDown}`);
    this.#drawn = 0;
  }

  /** Cut to the terminal's width, so that no line wraps (a wrapped line would break the redraw). */
  #fit(line: string): string {
    const width = Math.min(WIDTH, this.#out.columns ?? WIDTH);
    return [...line].length <= width ? line : `${[...line].slice(0, width - 1).join('')}…`;
  }

  #paint(text: string, colour: string): string {
    return this.#colour ? `${colour}${text}${ANSI.reset}` : text;
  }
}
