// Drives `kvcodec serve` with LangChain JS's @langchain/openai, unchanged, as an application
// would: its ChatOpenAI (chat completions) and OpenAI (completions) models pointed at the server.
// Run by run_node_client.sh (see client_checks.mjs).
import { API_KEY, BASE_URL, check, clientFetch, eq, finish, once, requireClient, step, stopCase } from './client_checks.mjs';

const { ChatOpenAI, OpenAI } = requireClient('@langchain/openai');

// No retries: a retried failure would hide what the server answered first.
const connection = { model: 'kvtiny', apiKey: API_KEY, maxRetries: 0, timeout: 60_000, configuration: { baseURL: BASE_URL, fetch: clientFetch } };
const greedy = (options = {}) => new ChatOpenAI({ ...connection, temperature: 0, maxTokens: 8, ...options });
const chat = greedy();

const PROMPTS = ['Who is the king of the land?', 'And the LORD spake unto Moses, saying', 'In the beginning God created'];
const greedyAnswer = (prompt) => once(`invoke ${prompt}`, () => chat.invoke(prompt));
const greedyText = async (prompt) => (await greedyAnswer(prompt)).content;

await step('ChatOpenAI invoke', async () => {
  const r = await greedyAnswer(PROMPTS[0]);
  check(typeof r.content === 'string' && r.content.length > 0, `content ${JSON.stringify(r.content)}`);
  eq(r.response_metadata?.finish_reason, 'length', 'finish_reason of 8 tokens');
  eq(r.usage_metadata?.output_tokens, 8, 'usage_metadata.output_tokens');
  check(r.usage_metadata?.input_tokens > 0, `usage_metadata.input_tokens ${r.usage_metadata?.input_tokens}`);
});

await step('ChatOpenAI stream', async () => {
  const chunks = [];
  for await (const chunk of await chat.stream(PROMPTS[0])) chunks.push(chunk.content);
  check(chunks.filter((c) => c).length > 1, `chunks ${JSON.stringify(chunks)}: want more than one with text`);
  eq(chunks.join(''), await greedyText(PROMPTS[0]), 'streamed chunks joined vs the invoked text');
});

// Batched requests decode together on the server; each answer must still be its own prompt's.
await step('ChatOpenAI batch', async () => {
  const answers = await chat.batch(PROMPTS);
  eq(answers.length, PROMPTS.length, 'number of answers');
  for (const [k, prompt] of PROMPTS.entries()) eq(answers[k].content, await greedyText(prompt), `answer ${k} vs its prompt invoked alone`);
});

await step('ChatOpenAI stop', async () => {
  const longer = greedy({ maxTokens: 24 });
  const { prompt, text, stop, i } = await stopCase(PROMPTS, async (p) => (await longer.invoke(p)).content);
  const r = await longer.invoke(prompt, { stop: [stop] });
  eq(r.content, text.slice(0, i), `text with stop ${JSON.stringify(stop)} (greedy text ${JSON.stringify(text)})`);
  eq(r.response_metadata?.finish_reason, 'stop', 'finish_reason');
  let streamed = '';
  for await (const chunk of await longer.stream(prompt, { stop: [stop] })) streamed += chunk.content;
  eq(streamed, text.slice(0, i), `streamed text with stop ${JSON.stringify(stop)}`);
});

await step('ChatOpenAI logprobs', async () => {
  const r = await greedy({ maxTokens: 5, logprobs: true, topLogprobs: 2 }).invoke(PROMPTS[0]);
  const content = r.response_metadata?.logprobs?.content;
  check(Array.isArray(content), `response_metadata.logprobs.content is ${JSON.stringify(content)}`);
  eq(content.length, r.usage_metadata?.output_tokens, 'logprobs.content.length vs usage_metadata.output_tokens');
  eq(content.map((e) => e.token).join(''), r.content, 'logprobs tokens joined vs the content');
  for (const [k, e] of content.entries()) {
    const ok = typeof e.logprob === 'number' && Number.isFinite(e.logprob) && e.logprob <= 0 &&
      e.top_logprobs?.length === 2 && e.top_logprobs.every((t) => typeof t.token === 'string' && typeof t.logprob === 'number' && t.logprob <= e.top_logprobs[0].logprob);
    check(ok, `logprobs.content[${k}] ${JSON.stringify(e)}: want a logprob <= 0 and 2 top_logprobs, best first`);
    eq(e.token, e.top_logprobs[0].token, `greedy token ${k} vs the best of its top_logprobs`);
  }
});

await step('ChatOpenAI n=2', async () => {
  const r = await greedy({ n: 2, temperature: 1, maxTokens: 6 }).generate([[['user', PROMPTS[0]]]]);
  eq(r.generations.length, 1, 'number of prompts answered');
  eq(r.generations[0].length, 2, 'generations for the prompt');
  for (const [k, g] of r.generations[0].entries()) check(typeof g.text === 'string' && g.text.length > 0, `generation ${k} text ${JSON.stringify(g.text)}`);
});

await step('OpenAI (completions) invoke', async () => {
  const completions = new OpenAI({ ...connection, temperature: 0, maxTokens: 8 });
  const text = await completions.invoke('The people went up to the city and');
  check(typeof text === 'string' && text.length > 0, `text ${JSON.stringify(text)}`);
  let streamed = '';
  for await (const chunk of await completions.stream('The people went up to the city and')) streamed += chunk;
  eq(streamed, text, 'streamed text joined vs the invoked text');
});

finish('LangChain');
