// The official `openai` npm client against hearth-gateway, issue 24: what clients match on.
// Errors carry OpenAI's code and param (context overflow in vLLM's words), models.retrieve()
// works, echo prepends the prompt, logprobs 0 lists the chosen token, tool calls are refused
// by name until they are parsed. Run by ctest (tests/gateway/gateway_conformance_test.cc),
// which starts the gateway and passes its address in HEARTH_GATEWAY_URL.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const baseURL = process.env.HEARTH_GATEWAY_URL;
assert.ok(baseURL, 'HEARTH_GATEWAY_URL must name the gateway (e.g. http://127.0.0.1:8000/v1)');
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });

test('models.retrieve() gives the model, and model_not_found otherwise', async () => {
  const m = await client.models.retrieve('fortunes');
  assert.equal(m.id, 'fortunes');
  assert.equal(m.object, 'model');
  await assert.rejects(client.models.retrieve('nope'), (e) => {
    assert.equal(e.status, 404);
    assert.equal(e.code, 'model_not_found');
    return true;
  });
});

test('a context overflow is context_length_exceeded in vLLM words', async () => {
  const m = await client.models.retrieve('fortunes');
  await assert.rejects(
    client.completions.create({ model: 'fortunes', prompt: 'A', max_tokens: m.max_model_len }),
    (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.code, 'context_length_exceeded');
      assert.equal(e.param, 'prompt');
      assert.match(e.message, /maximum context length is \d+ tokens/);
      assert.doesNotMatch(e.message, /cmpl-/);
      return true;
    },
  );
});

test('echo prepends the prompt', async () => {
  const params = { model: 'fortunes', prompt: 'A computer', max_tokens: 6, temperature: 0 };
  const plain = await client.completions.create(params);
  const echoed = await client.completions.create({ ...params, echo: true });
  assert.equal(echoed.choices[0].text, 'A computer' + plain.choices[0].text);
});

test('logprobs 0 lists the chosen token alone', async () => {
  const c = await client.completions.create({
    model: 'fortunes',
    prompt: 'A',
    max_tokens: 3,
    logprobs: 0,
    ignore_eos: true,
  });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, 3);
  lp.top_logprobs.forEach((top, i) => assert.deepEqual(top, { [lp.tokens[i]]: lp.token_logprobs[i] }));
});

test('tools are refused by name where the template teaches no tool-call format', async () => {
  const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
  const messages = [{ role: 'user', content: 'Hi' }];
  await assert.rejects(
    client.chat.completions.create({ model: 'fortunes', messages, tools, max_tokens: 2 }),
    (e) => e.status === 400 && e.param === 'tools',
  );
  await assert.rejects(
    client.chat.completions.create({
      model: 'fortunes',
      messages,
      tools,
      tool_choice: 'auto',
      max_tokens: 2,
    }),
    (e) => e.status === 400 && e.param === 'tools',
  );
});
