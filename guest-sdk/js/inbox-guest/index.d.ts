// Types of the inbox-host JavaScript/TypeScript SDK (see index.js).

/** A SQL parameter. `number` binds as int8 when it is a safe integer, else float8. */
export type Param =
  | null
  | undefined
  | boolean
  | number
  | bigint
  | string
  | Uint8Array
  | Date
  | Json
  | Timestamp
  | { [key: string]: unknown }
  | unknown[];

/** A column value as read: int8 beyond 2^53 reads as bigint, jsonb parsed, timestamptz as Date. */
export type Column = null | boolean | number | bigint | string | Uint8Array | Date | Timestamp | unknown;

export interface Header {
  key: string;
  /** null for a null header. */
  value: Uint8Array | null;
}

export declare class Event {
  /** The inbox key (with the consumer group): stable across redeliveries. */
  readonly messageId: string;
  readonly topic: string;
  readonly partition: number;
  readonly offset: number;
  readonly key: Uint8Array | null;
  readonly headers: Header[];
  /** The record value; empty for a null (tombstone) value. */
  readonly payload: Uint8Array;
  /** The payload as UTF-8 text; throws a fatal HandlerError when it is not. */
  text(): string;
  /** The payload parsed as JSON; throws a fatal HandlerError when it is not. */
  json(): unknown;
  /** The first header named `key` (null: absent or a null header). */
  header(key: string): Uint8Array | null;
}

export declare class Db {
  /** Runs one statement; returns the number of rows it affected. */
  execute(sql: string, params?: Param[]): number;
  /** Runs one statement and returns its rows as objects keyed by column name. */
  query(sql: string, params?: Param[]): Record<string, Column>[];
}

export declare class HandlerError extends Error {
  readonly retryable: boolean;
  constructor(message: string, options?: { retryable?: boolean });
}

export declare class DbError extends Error {
  /** SQLSTATE, or an IH code when the host refused the statement before it ran. */
  readonly code: string;
  /** Whether running the message again can succeed, as the host judged it. */
  readonly retryable: boolean;
}

export declare class Json {
  readonly value: unknown;
  constructor(value: unknown);
}

export declare class Timestamp {
  readonly micros: bigint;
  constructor(micros: bigint | number);
}

/** A message the host refused to publish; the run fails for good. */
export declare class PublishError extends Error {
  /** IH010 (topic not allowed), IH011 (too many), IH012 (too large) or IH013 (a reserved or non-text header). */
  readonly code: string;
}

/**
 * Publishes a message to `topic` once the transaction commits (never if it rolls
 * back): a Uint8Array, a string, or anything else as JSON. Messages with the
 * same topic and key arrive in the order published.
 */
export declare function publish(
  topic: string,
  value: Uint8Array | string | unknown,
  options?: { key?: Uint8Array | string | null; headers?: Record<string, string> },
): void;

/** A request the host refused; the run fails for good. */
export declare class RequestError extends Error {
  /** IH020 (URL or method not allowed), IH021 (too many), IH022 (too large) or IH023 (a header the host sets or cannot store). */
  readonly code: string;
}

/**
 * Asks for an HTTP request to be sent once the transaction commits (never if it
 * rolls back); returns the Idempotency-Key it will carry.
 */
export declare function sendAfterCommit(
  method: "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE",
  url: string,
  options?: {
    headers?: Record<string, string>;
    body?: Uint8Array | string;
    json?: unknown;
    orderingKey?: string | null;
    replyTopic?: string | null;
  },
): string;

/** What a handler module exports: synchronous, or async when it awaits fetch(). */
export type Handler = (event: Event, db: Db) => void | Promise<void>;
