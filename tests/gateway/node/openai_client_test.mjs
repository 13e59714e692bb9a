// The official `openai` npm client against a running hearth-gateway: it completes, streams and
// chats, and the streamed text equals the whole one. Run by ctest (tests/gateway), which starts
// the gateway and passes its address in HEARTH_GATEWAY_URL.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const baseURL = process.env.HEARTH_GATEWAY_URL;
assert.ok(baseURL, 'HEARTH_GATEWAY_URL must name the gateway (e.g. http://127.0.0.1:8000/v1)');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });

test('lists the model', async () => {
  const models = await client.models.list();
  assert.ok(models.data.some((m) => m.id === 'fortunes'), JSON.stringify(models.data));
});

test('completes and streams the same text', async () => {
  const params = { model: 'fortunes', prompt: 'A computer', max_tokens: 16, temperature: 0 };
  const whole = await client.completions.create(params);
  assert.equal(whole.object, 'text_completion');
  assert.equal(whole.usage.completion_tokens <= 16, true);
  let streamed = '';
  let finish = null;
  const stream = await client.completions.create({ ...params, stream: true });
  for await (const chunk of stream) {
    streamed += chunk.choices[0]?.text ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(streamed, whole.choices[0].text);
  assert.equal(finish, whole.choices[0].finish_reason);
});

test('chats, streamed and not, with usage', async (t) => {
  const params = {
    model: 'fortunes',
    messages: [{ role: 'user', content: 'Say something.' }],
    max_tokens: 12,
    temperature: 0.7,
    seed: 3,
  };
  let whole;
  try {
    whole = await client.chat.completions.create(params);
  } catch (e) {
    if (e.status === 400 && /chat template/.test(e.message)) return t.skip(e.message);
    throw e;
  }
  assert.equal(whole.choices[0].message.role, 'assistant');
  let streamed = '';
  let usage = null;
  const stream = await client.chat.completions.create({
    ...params,
    stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    streamed += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(streamed, whole.choices[0].message.content);
  assert.deepEqual(usage, whole.usage);
});

test('a bad parameter is an APIError naming it', async () => {
  await assert.rejects(
    client.completions.create({ model: 'fortunes', prompt: 'x', temperature: -1 }),
    (e) => e.status === 400 && /temperature/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: 'nope', prompt: 'x' }),
    (e) => e.status === 404,
  );
});
