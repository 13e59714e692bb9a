// Structured output with the official `openai` npm client: response_format json_schema
// (strict) and json_object, whole and streamed. Each complete answer is printed as
// `ANSWER <json>` for the calling ctest (tests/gateway/structured_output_http_test.cc), which
// validates it against SCHEMA with python3-jsonschema.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const baseURL = process.env.HEARTH_GATEWAY_URL;
assert.ok(baseURL, 'HEARTH_GATEWAY_URL must name the gateway (e.g. http://127.0.0.1:8000/v1)');
const schema = JSON.parse(process.env.SCHEMA);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const messages = [{ role: 'user', content: 'Tell my fortune.' }];

test('json_schema answers parse, whole and streamed alike', async () => {
  let complete = 0;
  for (const seed of [1, 2, 3]) {
    const response_format = {
      type: 'json_schema',
      json_schema: { name: 'fortune', strict: true, schema },
    };
    const body = { model: 'fortunes', messages, max_tokens: 200, seed, response_format };
    const whole = await client.chat.completions.create(body);
    let streamed = '';
    for await (const chunk of await client.chat.completions.create({ ...body, stream: true }))
      streamed += chunk.choices[0]?.delta?.content ?? '';
    const content = whole.choices[0].message.content;
    assert.equal(streamed, content);
    if (whole.choices[0].finish_reason === 'stop') {
      complete += 1;
      console.log(`ANSWER ${JSON.stringify(JSON.parse(content))}`);
    } else {
      assert.equal(whole.choices[0].finish_reason, 'length');
    }
  }
  assert.ok(complete > 0, 'no answer finished within max_tokens');
});

test('json_object answers are objects', async () => {
  const r = await client.completions.create({
    model: 'fortunes', prompt: 'A computer', max_tokens: 200, seed: 4,
    response_format: { type: 'json_object' },
  });
  if (r.choices[0].finish_reason === 'stop')
    assert.equal(typeof JSON.parse(r.choices[0].text), 'object');
});

test('an unsupported schema keyword is a 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model: 'fortunes', messages,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'n', schema: { type: 'string', format: 'date' } },
      },
    }),
    (e) => e.status === 400 && /'format'/.test(e.message),
  );
});
