// The sandbox test plugins of plugins/ in one JavaScript handler: the
// payload's `do` names the behaviour (each writes the order's invoice first
// where the Rust twin does). See plugins/sandbox-py/handler.py for the list.
import { DbError, HandlerError } from "inbox-guest";

const MARKER = "billing-v1";

export function handle(event, db) {
  const order = event.json();
  switch (order.do) {
    case "probe":
      return probe(event, db);
    case "fetch":
      // fetch goes out through wasi:http and the host's gate, which allows
      // nothing without --http-allow (and never loopback by address). The
      // test listens at `url`.
      fetch(order.url);
      return;
    case "loop":
      for (;;) {}
    case "memory": {
      const hoard = [];
      for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
    }
  }
  db.execute(
    "INSERT INTO invoices (order_id, amount, message_id, marker) VALUES ($1, $2, $3, $4)",
    [String(order.order_id), order.amount, event.messageId, MARKER],
  );
  switch (order.do) {
    case "exception-after-write":
      throw new Error("simulated exception after write");
    case "error-after-write":
      throw new HandlerError("simulated error after write", { retryable: true });
    case "swallow-db-error":
      try {
        db.execute("INSERT INTO no_such_table VALUES (1)");
      } catch (e) {
        if (!(e instanceof DbError)) throw e;
      }
  }
}

// StarlingMonkey has no file or socket API; what a script can reach is the
// environment (through WASI, which the host leaves empty) and fetch (through
// the host's gate: the `fetch` behaviour).
function probe(event, db) {
  const probes = {
    "env-count": () => {
      const env = globalThis.process?.env ?? {};
      const n = Object.keys(env).length;
      if (n === 0) throw new Error("no variables visible");
      return `${n} variables`;
    },
  };
  for (const [name, attempt] of Object.entries(probes)) {
    let outcome;
    try {
      outcome = `allowed: ${attempt()}`;
    } catch (e) {
      outcome = `denied: ${e}`;
    }
    db.execute("INSERT INTO sandbox_probe (message_id, probe, outcome) VALUES ($1, $2, $3)", [
      event.messageId,
      name,
      outcome,
    ]);
  }
}
