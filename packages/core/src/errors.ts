/**
 * Errors that cross a boundary carry a stable code, the HTTP status they map to, and whether a
 * retry can help. Workers decide between retry and dead-letter from `retryable`, never from text.
 */
import type { OtmError } from '@otm/model';

export const ErrorCode = {
  invalidDocument: 'invalidDocument',
  unauthorized: 'unauthorized',
  forbidden: 'forbidden',
  notFound: 'notFound',
  methodNotAllowed: 'methodNotAllowed',
  payloadTooLarge: 'payloadTooLarge',
  unsupportedMediaType: 'unsupportedMediaType',
  unavailable: 'unavailable',
  // Answers given before a request reaches a route: too slow, a path or headers too long, an
  // expectation the service does not meet.
  requestTimeout: 'requestTimeout',
  uriTooLong: 'uriTooLong',
  headersTooLarge: 'headersTooLarge',
  expectationFailed: 'expectationFailed',
  // A change feed cursor older than the feed keeps (OTM_FEED_RETENTION).
  cursorExpired: 'cursorExpired',
  // More open streams (GET /api/v5/stream) for one token than OTM_STREAMS_PER_TOKEN (429).
  tooManyStreams: 'tooManyStreams',
  // More requests (or bulk documents) than a quota allows: OTM_RATE_LIMIT, OTM_TENANT_RATE_LIMIT (429).
  tooManyRequests: 'tooManyRequests',
  // More webhook subscriptions for one tenant than the service keeps (409).
  tooManySubscriptions: 'tooManySubscriptions',
  // A store refuses writes for lack of room (a full disk, Redis at maxmemory): 503 with Retry-After (storage.ts).
  insufficientStorage: 'insufficientStorage',
  // A fault of the service (500).
  internal: 'internal',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** One item of an error answer: the model's error items, plus our own `type`s for non-400 answers. */
export type ErrorItem = OtmError | { type: AnswerType; message: string };

/** The `type` of the items of every non-400 error answer (500s included), in the order the OpenAPI lists them. */
export const ANSWER_TYPES = Object.values(ErrorCode).filter((c): c is Exclude<ErrorCode, 'invalidDocument'> => c !== 'invalidDocument');
export type AnswerType = (typeof ANSWER_TYPES)[number];

export class OtmServiceError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly retryable: boolean;
  readonly items: ErrorItem[];
  readonly headers: Record<string, string>;

  constructor(
    code: ErrorCode,
    status: number,
    message: string,
    opts: { items?: ErrorItem[]; retryable?: boolean; cause?: unknown; headers?: Record<string, string> } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'OtmServiceError';
    this.code = code;
    this.status = status;
    this.retryable = opts.retryable ?? false;
    this.items = opts.items ?? [];
    this.headers = opts.headers ?? {};
  }
}

export const invalidDocument = (items: OtmError[]) => new OtmServiceError(ErrorCode.invalidDocument, 400, 'invalid document', { items });

export const notFound = (message: string) =>
  new OtmServiceError(ErrorCode.notFound, 404, message, { items: [{ type: 'notFound', message }] });

export const cursorExpired = (message: string) =>
  new OtmServiceError(ErrorCode.cursorExpired, 410, message, { items: [{ type: 'cursorExpired', message }] });

export const tooManyStreams = (message: string, retryAfterSeconds: number) =>
  new OtmServiceError(ErrorCode.tooManyStreams, 429, message, {
    items: [{ type: 'tooManyStreams', message }],
    retryable: true,
    headers: { 'retry-after': String(retryAfterSeconds) },
  });

export const tooManyRequests = (message: string, headers: Record<string, string>) =>
  new OtmServiceError(ErrorCode.tooManyRequests, 429, message, { items: [{ type: 'tooManyRequests', message }], retryable: true, headers });

export const tooManySubscriptions = (message: string) =>
  new OtmServiceError(ErrorCode.tooManySubscriptions, 409, message, { items: [{ type: 'tooManySubscriptions', message }] });

export const unavailable = (message: string, retryAfterSeconds = 5, cause?: unknown) =>
  new OtmServiceError(ErrorCode.unavailable, 503, message, {
    items: [{ type: 'unavailable', message }],
    retryable: true,
    cause,
    headers: { 'retry-after': String(retryAfterSeconds) },
  });

/**
 * A failure of a store or bus adapter, typed so that the workers decide by type, never by text:
 * `retryable` when the same call may succeed later (the service is unreachable, a timeout, a
 * conflict), not when it never can (a record that cannot be decoded, a document the store refuses).
 */
export class AdapterError extends Error {
  readonly retryable: boolean;
  constructor(
    readonly adapter: string,
    message: string,
    opts: { retryable: boolean; cause?: unknown },
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'AdapterError';
    this.retryable = opts.retryable;
  }
}
