// What the client checks here share: the server's address, the client library from its cache, and
// the check runner. Each check runs on its own and prints "ok NAME" or "FAIL NAME: why"; finish()
// exits 1 if any failed. run_node_client.sh starts the server and sets
//   BASE_URL (http://host:port/v1), API_KEY, CLIENT_NODE_MODULES (the client's cached node_modules).
// With KVCODEC_TEST_LOG_REQUESTS=1 every request body a client sends is printed on stderr: the
// fields a client sends are what the server must accept.
import { createRequire } from 'node:module';
import path from 'node:path';

export const { BASE_URL, API_KEY } = process.env;
const { CLIENT_NODE_MODULES } = process.env;
if (!BASE_URL || !API_KEY || !CLIENT_NODE_MODULES) {
  console.error(`${process.argv[1]}: set BASE_URL, API_KEY and CLIENT_NODE_MODULES (run_node_client.sh does)`);
  process.exit(2);
}

// The client lives in a cache outside the clone, where an ESM import cannot look; resolve it from
// there as a module beside it would.
export const requireClient = createRequire(path.join(CLIENT_NODE_MODULES, 'resolve-from-here.js'));

// Every client here takes a fetch of its own; this one is the global fetch, logging when asked.
export async function clientFetch(url, init) {
  if (process.env.KVCODEC_TEST_LOG_REQUESTS === '1') {
    console.error(`request ${init?.method ?? 'GET'} ${new URL(url).pathname} ${init?.body ?? ''}`);
  }
  return fetch(url, init);
}

const failures = [];
export async function step(name, fn) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (e) {
    failures.push(name);
    console.log(`FAIL ${name}: ${describe(e)}`);
  }
}
// An HTTP error names its class and status (OpenAI's SDK says status, the AI SDK statusCode).
export function describe(e) {
  if (!(e instanceof Error)) return String(e);
  const status = e.status ?? e.statusCode;
  return status === undefined ? `${e.name}: ${e.message}` : `${e.constructor.name} (status ${status}): ${e.message}`;
}
export function check(cond, what) {
  if (!cond) throw new Error(what);
}
export function eq(actual, expected, what) {
  if (actual !== expected) throw new Error(`${what}: got ${JSON.stringify(actual)}, want ${JSON.stringify(expected)}`);
}
// The error a call must fail with.
export async function rejection(promise) {
  try {
    await promise;
  } catch (e) {
    return e;
  }
  throw new Error('the call succeeded; want it to fail');
}
// Several checks compare with the same greedy answer; a failed one is asked again by the next.
const memo = new Map();
export function once(key, fn) {
  if (!memo.has(key)) memo.set(key, fn().catch((e) => { memo.delete(key); throw e; }));
  return memo.get(key);
}

// A stop string cut from a greedy answer T at its first occurrence i must end the same request
// with T.slice(0, i): the server must match stop strings across token boundaries. `answer(prompt)`
// is the greedy text for a prompt; the first prompt whose answer has such a string is taken.
export async function stopCase(prompts, answer) {
  for (const prompt of prompts) {
    const text = await answer(prompt);
    for (const len of [3, 2, 4]) {
      for (let i = 3; i + len <= text.length; i++) {
        const stop = text.slice(i, i + len);
        if (text.indexOf(stop) === i) return { prompt, text, stop, i };
      }
    }
  }
  throw new Error('no greedy answer long enough to cut a stop string from');
}

export function finish(what) {
  if (failures.length) {
    console.log(`${failures.length} failed: ${failures.join(', ')}`);
    process.exit(1);
  }
  console.log(`all ${what} checks passed`);
}
