// Streamed tool calls from a real hearth-gateway, read by the official `openai` npm client. The
// default model writes a call only when one is forced (tool_choice "required" or a named
// function: the structured-output mask), so those are what is asked here. Each call's arguments
// are printed as `ARGS <name> <json>` for the calling ctest
// (tests/gateway/tool_calls/gateway_tool_calls_test.cc), which validates them with
// python3-jsonschema against the tool's parameters.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const baseURL = process.env.HEARTH_GATEWAY_URL;
assert.ok(baseURL, 'HEARTH_GATEWAY_URL must name the gateway (e.g. http://127.0.0.1:8000/v1)');
const tools = JSON.parse(process.env.TOOLS);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const names = tools.map((t) => t.function.name);

for (const [label, tool_choice] of [
  ['required', 'required'],
  ['named', { type: 'function', function: { name: names[names.length - 1] } }],
]) {
  test(`${label}: the stream helper's final completion equals the whole response`, async () => {
    const body = { model: 'fortunes', messages, tools, tool_choice, max_tokens: 200, temperature: 0 };
    const whole = (await client.chat.completions.create(body)).choices[0];
    assert.equal(whole.finish_reason, 'tool_calls');
    assert.equal(whole.message.tool_calls.length, 1);
    const final = (await client.chat.completions.stream(body).finalChatCompletion()).choices[0];
    assert.equal(final.finish_reason, 'tool_calls');
    assert.ok(!final.message.content, `content beside the call: ${final.message.content}`);
    assert.equal(final.message.tool_calls.length, 1);
    const [got, want] = [final.message.tool_calls[0], whole.message.tool_calls[0]];
    assert.equal(got.type, 'function');
    assert.ok(got.id.startsWith('call_'), got.id);
    assert.equal(got.function.name, want.function.name);
    assert.equal(got.function.arguments, want.function.arguments);
    if (typeof tool_choice === 'object') assert.equal(got.function.name, tool_choice.function.name);
    assert.ok(names.includes(got.function.name), got.function.name);
    console.log(`ARGS ${got.function.name} ${got.function.arguments}`);
  });
}

test('raw chunks name the function before its arguments', async () => {
  const stream = await client.chat.completions.create({
    model: 'fortunes', messages, tools, tool_choice: 'required', max_tokens: 200, temperature: 0,
    stream: true,
  });
  let named = false, args = '', finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    for (const call of choice.delta?.tool_calls ?? []) {
      assert.equal(call.index, 0);
      if (call.function?.name) named = true;
      if (call.function?.arguments) {
        assert.ok(named, 'arguments before the function name');
        args += call.function.arguments;
      }
    }
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.ok(args.length > 0);
  JSON.parse(args);
});
