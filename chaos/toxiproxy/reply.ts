import { ApiError } from './errors.ts';
import { encodeJson } from './goJson.ts';

/** An HTTP answer, byte for byte what Toxiproxy sends for the same request. */
export interface Reply {
  readonly status: number;
  readonly body: string;
  readonly headers: Readonly<Record<string, string>>;
}

/** Compact JSON without a trailing newline (Go's `json.Marshal` then `Write`). */
export function jsonReply(body: string, status = 200): Reply {
  return { status, body, headers: { 'Content-Type': 'application/json' } };
}

/** 204 with no body. */
export function noContent(): Reply {
  return { status: 204, body: '', headers: {} };
}

/**
 * Go's `http.Error`: the text plus a newline, as `text/plain` (it overrides the JSON content type
 * Toxiproxy sets first).
 */
export function plainError(text: string, status: number): Reply {
  return {
    status,
    body: `${text}\n`,
    headers: { 'Content-Type': 'text/plain; charset=utf-8', 'X-Content-Type-Options': 'nosniff' },
  };
}

/** `{"error":"<message>","status":<code>}` and a newline; any error that is not an `ApiError` is a 500. */
export function errorReply(error: unknown): Reply {
  const { message, status } = asApiError(error);
  return plainError(encodeJson({ error: message, status }), status);
}

/** `error` as an `ApiError`: its own status, else 500 with its message (Toxiproxy's rule). */
export function asApiError(error: unknown): ApiError {
  if (error instanceof ApiError) return error;
  return new ApiError(error instanceof Error ? error.message : String(error), 500);
}
