/**
 * An error the API answers with its own status, as Toxiproxy's `ApiError`: the body is
 * `{"error":"<message>","status":<status>}` plus a newline. Any other error is answered as a 500
 * with its message, as Toxiproxy does.
 */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  readonly status: number;

  constructor(message: string, status: number) {
    super(message);
    this.status = status;
  }
}

/** 400 for a body that cannot be used; `detail` says why, in our words. */
export const badRequestBody = (detail: string): ApiError => new ApiError(`bad request body: ${detail}`, 400);
/** 400 for a required field left empty; `field` may say where (`name at proxy 2`). */
export const missingField = (field: string): ApiError => new ApiError(`missing required field: ${field}`, 400);
export const proxyNotFound = (): ApiError => new ApiError('proxy not found', 404);
export const proxyAlreadyExists = (): ApiError => new ApiError('proxy already exists', 409);
export const invalidStream = (): ApiError => new ApiError('stream was invalid, can be either upstream or downstream', 400);
export const invalidToxicType = (): ApiError => new ApiError('invalid toxic type', 400);
export const toxicAlreadyExists = (): ApiError => new ApiError('toxic already exists', 409);
export const toxicNotFound = (): ApiError => new ApiError('toxic not found', 404);
/** 404 for a path or method the API does not serve. */
export const routeNotFound = (): ApiError => new ApiError('not found', 404);
