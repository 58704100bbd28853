// Drives `kvcodec serve` with the Vercel AI SDK and its @ai-sdk/openai-compatible provider,
// unchanged, as an application would: generateText, streamText, an abort, and the HTTP errors
// the SDK maps to its own error type. Run by run_node_client.sh (see client_checks.mjs).
import { API_KEY, BASE_URL, check, clientFetch, describe, eq, finish, once, rejection, requireClient, step } from './client_checks.mjs';

const { APICallError, generateText, streamText } = requireClient('ai');
const { createOpenAICompatible } = requireClient('@ai-sdk/openai-compatible');

const provider = (apiKey) => createOpenAICompatible({ name: 'kvcodec', baseURL: BASE_URL, apiKey, includeUsage: true, fetch: clientFetch });
const model = provider(API_KEY)('kvtiny');
const PROMPT = 'Who is the king of the land?';
// No retries: a retried failure would hide what the server answered first.
const greedy = { model, prompt: PROMPT, maxOutputTokens: 8, temperature: 0, maxRetries: 0 };
const greedyAnswer = () => once('generateText', () => generateText(greedy));

async function expectApiCallError(promise, statusCode) {
  const e = await rejection(promise);
  check(APICallError.isInstance(e), `want APICallError, got ${describe(e)}`);
  eq(e.statusCode, statusCode, 'statusCode');
  eq(e.isRetryable, false, 'isRetryable');
  return e;
}

// streamText puts an error into the stream, not in a rejection: it is thrown here after the stream
// ends. afterChunk sees each text chunk as it comes.
async function streamTextChunks(options, afterChunk = () => {}) {
  let failure = null;
  const result = streamText({ ...options, onError: ({ error }) => { failure = error; } });
  const chunks = [];
  for await (const chunk of result.textStream) {
    chunks.push(chunk);
    afterChunk(chunk);
  }
  if (failure) throw failure;
  return { result, chunks };
}

await step('generateText', async () => {
  const r = await greedyAnswer();
  check(typeof r.text === 'string' && r.text.length > 0, `text ${JSON.stringify(r.text)}`);
  eq(r.finishReason, 'length', 'finishReason of 8 tokens');
  eq(r.usage.outputTokens, 8, 'usage.outputTokens');
  check(r.usage.inputTokens > 0, `usage.inputTokens ${r.usage.inputTokens}`);
  eq(r.usage.totalTokens, r.usage.inputTokens + r.usage.outputTokens, 'usage.totalTokens');
});

await step('streamText', async () => {
  const { result: s, chunks } = await streamTextChunks(greedy);
  check(chunks.length > 1, `chunks ${JSON.stringify(chunks)}: want more than one`);
  const base = await greedyAnswer();
  eq(chunks.join(''), base.text, 'streamed chunks joined vs the generateText text');
  eq(await s.finishReason, 'length', 'finishReason');
  const usage = await s.usage;
  eq(usage.outputTokens, base.usage.outputTokens, 'usage.outputTokens vs generateText');
  eq(usage.inputTokens, base.usage.inputTokens, 'usage.inputTokens vs generateText');
});

// The client drops the connection mid-stream; the server must carry on serving.
await step('streamText abort', async () => {
  const controller = new AbortController();
  let aborted = false;
  const options = { ...greedy, maxOutputTokens: 64, abortSignal: controller.signal, onAbort: () => { aborted = true; } };
  const { result: s, chunks } = await streamTextChunks(options, () => controller.abort());
  eq(chunks.length, 1, 'text chunks read, the abort after the first');
  check(aborted, 'onAbort was not called');
  const e = await rejection(s.text);
  eq(e?.name, 'AbortError', `the aborted stream's text rejects with (${describe(e)})`);
  const after = await generateText(greedy);
  eq(after.text, (await greedyAnswer()).text, 'the greedy text of a request after the abort');
});

await step('wrong API key is APICallError 401', async () => {
  await expectApiCallError(generateText({ ...greedy, model: provider('wrong')('kvtiny') }), 401);
});

await step('max_tokens beyond the context is APICallError 400 with the server message', async () => {
  const e = await expectApiCallError(generateText({ ...greedy, maxOutputTokens: 100_000 }), 400);
  const served = JSON.parse(e.responseBody ?? 'null')?.error?.message;
  check(typeof served === 'string' && /max_tokens/.test(served), `the server's error.message ${JSON.stringify(served)} does not name max_tokens`);
  eq(e.message, served, "the error's message vs the server's");
});

await step('completionModel generateText', async () => {
  const r = await generateText({ ...greedy, model: provider(API_KEY).completionModel('kvtiny'), prompt: 'The people went up to the city and' });
  check(typeof r.text === 'string' && r.text.length > 0, `text ${JSON.stringify(r.text)}`);
  eq(r.usage.outputTokens, 8, 'usage.outputTokens');
});

finish('Vercel AI SDK');
