/** HTTP answers of the API: JSON, an empty 204, or an error. */
import { ApiError } from './errors.ts';

/** An HTTP answer, before it is sent. */
export interface Reply {
  readonly status: number;
  readonly body: string;
  readonly headers: Readonly<Record<string, string>>;
}

const JSON_TYPE = { 'Content-Type': 'application/json' } as const;

/** `value` as JSON (objects with a `toJSON`, such as a proxy, serialise themselves). */
export function jsonReply(value: unknown, status = 200): Reply {
  return { status, body: JSON.stringify(value), headers: JSON_TYPE };
}

/** 204 with no body. */
export function noContent(): Reply {
  return { status: 204, body: '', headers: {} };
}

/**
 * `{"error":"<message>","status":<code>}` and a newline, as Toxiproxy writes its errors. Any error
 * that is not an `ApiError` is a 500 with its message (Toxiproxy's rule).
 */
export function errorReply(error: unknown): Reply {
  const { message, status } = error instanceof ApiError ? error : new ApiError(error instanceof Error ? error.message : String(error), 500);
  return { status, body: `${JSON.stringify({ error: message, status })}\n`, headers: JSON_TYPE };
}
