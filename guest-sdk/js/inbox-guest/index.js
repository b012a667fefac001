// SDK for inbox-host handler plugins written in JavaScript or TypeScript.
//
// A plugin is a folder with handler.js (or handler.ts) exporting one function:
//
//   export function handle(event, db) {
//     const order = event.json();
//     db.execute("INSERT INTO invoices (order_id, amount) VALUES ($1, $2)",
//                [order.order_id, order.amount]);
//   }
//
// Returning asks the host to commit the message's transaction; throwing rolls
// it back. Throw `new HandlerError(message, { retryable })` to say whether
// delivering the message again can help; a DbError that escapes keeps the
// host's judgement of its statement; anything else thrown is a crash (like a
// Rust panic): fatal, recorded with its message.
//
// A handler that is a step in a pipeline also publishes with
// `publish(topic, value, { key, headers })`: stored in the same transaction and
// sent to Kafka after it commits (docs/outbox.md). One that reaches beyond the
// database asks for an HTTP request with `sendAfterCommit(method, url, { json })`,
// sent once the transaction commits, or, when it needs the answer, is an
// `async` handler that awaits `fetch()` (wasi:http, through the host's gate);
// both carry an Idempotency-Key the host derives (docs/effects.md).
import * as wit from "inbox:host/db@0.3.1";
import * as outbox from "inbox:host/outbox@0.3.1";
import * as requests from "inbox:host/requests@0.3.1";

/** Fails the message on purpose; `retryable` (default false) says whether delivering it again can help. */
export class HandlerError extends Error {
  constructor(message, { retryable = false } = {}) {
    super(String(message));
    this.name = "HandlerError";
    this.retryable = Boolean(retryable);
  }
}

/** A failed statement: SQLSTATE (or an IH code for a statement the host refused), message, and the host's verdict on retrying. */
export class DbError extends Error {
  constructor(code, message, retryable) {
    super(`${code}: ${message}`);
    this.name = "DbError";
    this.code = code;
    this.retryable = retryable;
  }
}

/** A parameter bound as jsonb (plain objects and arrays are bound so too). */
export class Json {
  constructor(value) {
    this.value = value;
  }
}

/** Microseconds since 1970-01-01T00:00:00Z (a bigint): a timestamptz parameter, and what a column outside Date's range reads as. */
export class Timestamp {
  constructor(micros) {
    this.micros = BigInt(micros);
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The message being handled. */
export class Event {
  constructor(event) {
    this.messageId = event.messageId;
    this.topic = event.topic;
    this.partition = event.partition;
    this.offset = Number(event.offset);
    this.key = event.key ?? null;
    this.headers = event.headers.map((h) => ({ key: h.key, value: h.value ?? null }));
    this.payload = event.payload;
  }

  /** The payload as UTF-8 text; a payload that is not is a fatal HandlerError. */
  text() {
    try {
      return utf8.decode(this.payload);
    } catch (e) {
      throw new HandlerError(`payload is not UTF-8 text: ${e.message}`);
    }
  }

  /** The payload parsed as JSON; a payload that is not is a fatal HandlerError. */
  json() {
    const text = this.text();
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new HandlerError(`payload is not JSON: ${e.message}`);
    }
  }

  /** The value of the first header named `key` (null: absent or a null header). */
  header(key) {
    const found = this.headers.find((h) => h.key === key);
    return found ? found.value : null;
  }
}

/** The message's PostgreSQL transaction. */
export class Db {
  /** Runs one statement; returns the number of rows it affected. */
  execute(sql, params = []) {
    return Number(call(() => wit.execute(sql, params.map(toValue))));
  }

  /** Runs one statement and returns its rows as objects keyed by column name. */
  query(sql, params = []) {
    const result = call(() => wit.query(sql, params.map(toValue)));
    return result.rows.map((row) => {
      const object = {};
      result.columns.forEach((name, i) => {
        object[name] = fromValue(row[i]);
      });
      return object;
    });
  }
}

/** A message the host refused to publish (IH010 topic not allowed, IH011 too many, IH012 too large, IH013 a reserved or non-text header); the run fails for good. */
export class PublishError extends Error {
  constructor(code, message) {
    super(`${code} ${message}`);
    this.name = "PublishError";
    this.code = code;
  }
}

const utf8Encoder = new TextEncoder();

function bytesOf(value) {
  if (value instanceof Uint8Array) return value;
  if (typeof value === "string") return utf8Encoder.encode(value);
  return utf8Encoder.encode(JSON.stringify(value));
}

/**
 * Publishes a message to `topic` once the transaction commits (never if it
 * rolls back). `value` is a Uint8Array, a string, or anything else as JSON.
 * The host derives its message_id from the group, the incoming message and the
 * position of this call, so a run repeated after a rollback publishes the same ids.
 */
export function publish(topic, value, { key = null, headers = {} } = {}) {
  const message = {
    topic,
    key: key === null || key === undefined ? undefined : bytesOf(key),
    value: bytesOf(value),
    headers: Object.entries(headers).map(([name, text]) => ({
      key: name,
      value: utf8Encoder.encode(String(text)),
    })),
  };
  try {
    outbox.publish(message);
  } catch (e) {
    const error = e && e.payload;
    if (error && typeof error.code === "string") {
      throw new PublishError(error.code, error.message);
    }
    throw e;
  }
}

/** A request the host refused (IH020 URL or method not allowed, IH021 too many, IH022 too large, IH023 a header the host sets or cannot store); the run fails for good. */
export class RequestError extends Error {
  constructor(code, message) {
    super(`${code} ${message}`);
    this.name = "RequestError";
    this.code = code;
  }
}

/**
 * Asks for an HTTP request to be sent once the transaction commits (never if it
 * rolls back); returns the Idempotency-Key it will carry, the same on every
 * resend and every run of this message. `json` (any value but undefined)
 * becomes the body with content-type application/json; requests with the same
 * `orderingKey` go one after another in the order written; with a `replyTopic`
 * the answer is published there.
 */
export function sendAfterCommit(
  method,
  url,
  { headers = {}, body, json, orderingKey = null, replyTopic = null } = {},
) {
  const pairs = Object.entries(headers).map(([name, text]) => [name, String(text)]);
  let bytes = body === undefined ? new Uint8Array() : bytesOf(body);
  if (json !== undefined) {
    if (body !== undefined) throw new TypeError("give a request body or json, not both");
    pairs.push(["content-type", "application/json"]);
    bytes = utf8Encoder.encode(JSON.stringify(json));
  }
  const request = {
    method,
    url,
    headers: pairs.map(([key, text]) => ({ key, value: utf8Encoder.encode(text) })),
    body: bytes,
    orderingKey: orderingKey ?? undefined,
    replyTopic: replyTopic ?? undefined,
  };
  try {
    return requests.sendAfterCommit(request);
  } catch (e) {
    const error = e && e.payload;
    if (error && typeof error.code === "string") {
      throw new RequestError(error.code, error.message);
    }
    throw e;
  }
}

function call(statement) {
  try {
    return statement();
  } catch (e) {
    const error = e && e.payload;
    if (error && typeof error.code === "string") {
      throw new DbError(error.code, error.message, error.retryable);
    }
    throw e;
  }
}

function toValue(value) {
  if (value === null || value === undefined) return { tag: "null" };
  switch (typeof value) {
    case "boolean":
      return { tag: "boolean", val: value };
    case "number":
      return Number.isSafeInteger(value)
        ? { tag: "int64", val: BigInt(value) }
        : { tag: "float64", val: value };
    case "bigint":
      return { tag: "int64", val: value };
    case "string":
      return { tag: "text", val: value };
  }
  if (value instanceof Uint8Array) return { tag: "bytes", val: value };
  if (value instanceof Json) return { tag: "json", val: JSON.stringify(value.value) };
  if (value instanceof Timestamp) return { tag: "timestamp", val: value.micros };
  if (value instanceof Date) return { tag: "timestamp", val: BigInt(value.getTime()) * 1000n };
  if (Array.isArray(value) || Object.getPrototypeOf(value) === Object.prototype) {
    return { tag: "json", val: JSON.stringify(value) };
  }
  throw new TypeError(
    `cannot bind ${value?.constructor?.name ?? typeof value} as a SQL parameter ` +
      "(null, boolean, number, bigint, string, Uint8Array, object, array, Json, Date, Timestamp)",
  );
}

const MAX_DATE_MICROS = 8640000000000000000n;

function fromValue(value) {
  switch (value.tag) {
    case "null":
      return null;
    case "int64":
      // Exact as a number when it fits; a bigint otherwise.
      return value.val >= BigInt(Number.MIN_SAFE_INTEGER) && value.val <= BigInt(Number.MAX_SAFE_INTEGER)
        ? Number(value.val)
        : value.val;
    case "json":
      return JSON.parse(value.val);
    case "timestamp":
      return value.val >= -MAX_DATE_MICROS && value.val <= MAX_DATE_MICROS
        ? new Date(Number(value.val / 1000n))
        : new Timestamp(value.val);
    default:
      return value.val;
  }
}

/**
 * The component's `handle` export calls this with the plugin's `handle`. An
 * `async` handler's promise is returned: componentize-js runs the event loop
 * (its fetch() calls) until it settles.
 */
export function run(event, handle) {
  let returned;
  try {
    returned = handle(new Event(event), new Db());
  } catch (e) {
    throw failure(e);
  }
  if (returned && typeof returned.then === "function") {
    return returned.then(
      () => undefined,
      (e) => {
        throw failure(e);
      },
    );
  }
  return undefined;
}

// How an exception ends the run: the error the host records, or a crash.
function failure(e) {
  if (e instanceof HandlerError || e instanceof DbError) {
    return { payload: { message: e.message, retryable: e.retryable } };
  }
  if (e instanceof PublishError || e instanceof RequestError) {
    return { payload: { message: e.message, retryable: false } };
  }
  crash(e);
}

// An exception the handler did not mean to throw is a crash, like a Rust
// panic: said on stderr as `uncaught <exception>` (the host records that
// line), then a trap, which an error value the host's types cannot hold causes.
function crash(error) {
  console.error(`uncaught ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
  throw { payload: null };
}
