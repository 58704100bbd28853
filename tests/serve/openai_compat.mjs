// Drives `kvcodec serve` with the official OpenAI Node SDK, unchanged, as an application would:
// a drop-in server must answer every call the SDK makes with what the SDK expects.
// Run by run_node_client.sh (see client_checks.mjs).
import { API_KEY, BASE_URL, check, clientFetch, describe, eq, finish, once, rejection, requireClient, step, stopCase }
  from './client_checks.mjs';

const { OpenAI } = requireClient('openai');

// No retries: a retried failure would hide what the server answered first.
const client = new OpenAI({ baseURL: BASE_URL, apiKey: API_KEY, maxRetries: 0, timeout: 60_000, fetch: clientFetch });
let model = 'kvtiny';  // replaced by what models.list says, if it answers

async function expectError(promise, Cls, status) {
  const e = await rejection(promise);
  check(e instanceof Cls, `want ${Cls.name}, got ${describe(e)}`);
  eq(e.status, status, 'status');
  return e;
}

const PROMPT = 'The people went up to the city and';
const MESSAGES = [{ role: 'user', content: 'Who is the king of the land?' }];
const greedyCompletion = () => once('completion', () => client.completions.create({ model, prompt: PROMPT, max_tokens: 8 }));
const greedyChat = () => once('chat', () => client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 8 }));

async function streamedCompletion(params) {
  let text = '';
  let finish = null;
  for await (const chunk of await client.completions.create({ ...params, stream: true })) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { text, finish };
}
async function chatChunks(params) {
  const chunks = [];
  for await (const chunk of await client.chat.completions.create({ ...params, stream: true })) chunks.push(chunk);
  return chunks;
}
const chunkContent = (chunks) => chunks.flatMap((c) => c.choices).map((c) => c.delta?.content ?? '').join('');

await step('models.list', async () => {
  const { data } = await client.models.list();
  eq(data.length, 1, 'number of models');
  check(typeof data[0].id === 'string' && data[0].id, `model id ${JSON.stringify(data[0].id)}`);
  model = data[0].id;
});

await step('completions.create', async () => {
  const r = await greedyCompletion();
  eq(r.choices.length, 1, 'choices.length');
  check(typeof r.choices[0].text === 'string', `text is ${typeof r.choices[0].text}`);
  check(['length', 'stop'].includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
  check(r.usage?.prompt_tokens > 0, `usage.prompt_tokens ${r.usage?.prompt_tokens}`);
  check(r.usage?.completion_tokens > 0, `usage.completion_tokens ${r.usage?.completion_tokens}`);
  eq(r.model, model, 'model');
});

await step('completions.create stream', async () => {
  const base = await greedyCompletion();
  const s = await streamedCompletion({ model, prompt: PROMPT, max_tokens: 8 });
  eq(s.text, base.choices[0].text, 'streamed text joined vs the non-streaming text');
  eq(s.finish, base.choices[0].finish_reason, 'finish_reason');
});

await step('chat.completions.create', async () => {
  const r = await greedyChat();
  eq(r.choices.length, 1, 'choices.length');
  eq(r.choices[0].message.role, 'assistant', 'message.role');
  check(typeof r.choices[0].message.content === 'string', `content is ${typeof r.choices[0].message.content}`);
  check(['length', 'stop'].includes(r.choices[0].finish_reason), `finish_reason ${r.choices[0].finish_reason}`);
});

await step('chat.completions.create stream', async () => {
  const base = await greedyChat();
  const chunks = await chatChunks({ model, messages: MESSAGES, max_tokens: 8 });
  check(chunks.length > 0, 'no chunks');
  eq(chunks[0].choices[0]?.delta?.role, 'assistant', "first chunk's delta.role");
  eq(chunkContent(chunks), base.choices[0].message.content, 'streamed content joined vs the non-streaming content');
});

await step('chat.completions.create stream include_usage', async () => {
  const base = await greedyChat();
  const chunks = await chatChunks({ model, messages: MESSAGES, max_tokens: 8, stream_options: { include_usage: true } });
  check(chunks.length > 1, `${chunks.length} chunks`);
  eq(chunks[0].choices[0]?.delta?.role, 'assistant', "first chunk's delta.role");
  eq(chunkContent(chunks), base.choices[0].message.content, 'streamed content joined vs the non-streaming content');
  const last = chunks.at(-1);
  eq(last.choices.length, 0, "the last (usage) chunk's choices.length");
  check(last.usage?.prompt_tokens > 0 && last.usage?.completion_tokens > 0,
    `the last chunk's usage ${JSON.stringify(last.usage)}`);
});

await step('chat.completions.stream finalChatCompletion', async () => {
  const base = await greedyChat();
  const final = await client.chat.completions.stream({ model, messages: MESSAGES, max_tokens: 8 }).finalChatCompletion();
  eq(final.choices[0].message.content, base.choices[0].message.content, 'final content vs the non-streaming content');
});

const stopPrompts = ['And it came to pass, when the king', PROMPT, 'In the beginning God created'];
const longGreedyText = async (prompt) => (await client.completions.create({ model, prompt, max_tokens: 24 })).choices[0].text;
const greedyStopCase = () => once('stop', () => stopCase(stopPrompts, longGreedyText));

await step('completions.create stop', async () => {
  const { prompt, text, stop, i } = await greedyStopCase();
  const r = await client.completions.create({ model, prompt, max_tokens: 24, stop: [stop] });
  eq(r.choices[0].text, text.slice(0, i), `text with stop ${JSON.stringify(stop)} (greedy text ${JSON.stringify(text)})`);
  eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
});

await step('completions.create stop stream', async () => {
  const { prompt, text, stop, i } = await greedyStopCase();
  const s = await streamedCompletion({ model, prompt, max_tokens: 24, stop: [stop] });
  eq(s.text, text.slice(0, i), `streamed text with stop ${JSON.stringify(stop)} (greedy text ${JSON.stringify(text)})`);
  eq(s.finish, 'stop', 'finish_reason');
});

await step('completions.create n=2', async () => {
  const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 8, n: 2, temperature: 1.0, seed: 7 });
  eq(r.choices.length, 2, 'choices.length');
  eq(r.choices.map((c) => c.index).sort().join(','), '0,1', 'choice indexes');
  for (const c of r.choices) check(typeof c.text === 'string', `choice ${c.index} text is ${typeof c.text}`);
});

await step('completions.create logprobs', async () => {
  const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 5, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  check(lp, `choices[0].logprobs is ${JSON.stringify(lp)}`);
  const n = r.usage?.completion_tokens;
  check(Array.isArray(lp.tokens), 'logprobs.tokens is not an array');
  eq(lp.tokens.length, n, 'logprobs.tokens.length vs usage.completion_tokens');
  check(lp.token_logprobs?.length === n && lp.token_logprobs.every((x) => typeof x === 'number' && x <= 0),
    `token_logprobs ${JSON.stringify(lp.token_logprobs)}: want ${n} numbers <= 0`);
  check(lp.top_logprobs?.length === n && lp.top_logprobs.every((o) => o && typeof o === 'object' &&
    Object.keys(o).length >= 1 && Object.keys(o).length <= 3 && Object.values(o).every((x) => typeof x === 'number' && x <= 0)),
  `top_logprobs ${JSON.stringify(lp.top_logprobs)}: want ${n} objects of 1 to 3 logprobs`);
  check(lp.text_offset?.length === n && lp.text_offset.every((x, k) => Number.isInteger(x) && (k === 0 || x >= lp.text_offset[k - 1])),
    `text_offset ${JSON.stringify(lp.text_offset)}: want ${n} non-decreasing integers`);
});

await step('chat.completions.create logprobs', async () => {
  const r = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 5, logprobs: true, top_logprobs: 2 });
  const content = r.choices[0].logprobs?.content;
  check(Array.isArray(content) && content.length > 0, `choices[0].logprobs.content is ${JSON.stringify(content)}`);
  eq(content.length, r.usage?.completion_tokens, 'logprobs.content.length vs usage.completion_tokens');
  for (const [k, e] of content.entries()) {
    const ok = typeof e.token === 'string' && typeof e.logprob === 'number' && e.logprob <= 0 &&
      Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b <= 255) &&
      Array.isArray(e.top_logprobs) && e.top_logprobs.length === 2;
    check(ok, `logprobs.content[${k}] ${JSON.stringify(e)}: want token, logprob <= 0, bytes, 2 top_logprobs`);
  }
});

await step('seed reproducibility', async () => {
  const sample = async (seed) =>
    (await client.completions.create({ model, prompt: PROMPT, max_tokens: 16, temperature: 1.0, top_p: 0.95, seed })).choices[0].text;
  eq(await sample(1234), await sample(1234), 'text of a second request with seed 1234');
  const texts = new Set();
  for (let seed = 1; seed <= 6; seed++) texts.add(await sample(seed));
  check(texts.size >= 2, `seeds 1..6 at temperature 1 all gave ${JSON.stringify([...texts][0])}: nothing is sampled`);
});

await step('wrong API key is a 401', async () => {
  const wrong = new OpenAI({ baseURL: BASE_URL, apiKey: 'wrong', maxRetries: 0, timeout: 60_000, fetch: clientFetch });
  await expectError(wrong.completions.create({ model, prompt: PROMPT, max_tokens: 1 }), OpenAI.AuthenticationError, 401);
});

await step('tools is a 400 naming it', async () => {
  const e = await expectError(client.chat.completions.create({
    model, messages: MESSAGES, max_tokens: 4,
    tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: {} } } }],
  }), OpenAI.BadRequestError, 400);
  check(/tools/.test(e.message), `the message does not name tools: ${e.message}`);
});

finish('OpenAI SDK');
