// The official `openai` npm client reading hearth's streamed tool calls: a local server sends
// the chunks the gateway's tool-call path makes for fixed model outputs (the default model never
// writes a call), and the client's own stream helper must put together the calls of the whole
// response. Run by ctest (tests/gateway/tool_calls), which writes the fixtures to the file
// HEARTH_TOOL_CALL_FIXTURES names: {family: {"sse": body, "response": whole response}}.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { test } from 'node:test';
import OpenAI from 'openai';

const path = process.env.HEARTH_TOOL_CALL_FIXTURES;
assert.ok(path, 'HEARTH_TOOL_CALL_FIXTURES must name the fixtures file');
const fixtures = JSON.parse(readFileSync(path, 'utf8'));

// The model name picks the fixture.
const server = createServer((req, res) => {
  let body = '';
  req.on('data', (d) => (body += d));
  req.on('end', () => {
    const { model } = JSON.parse(body);
    res.writeHead(200, { 'Content-Type': 'text/event-stream' });
    res.end(fixtures[model].sse);
  });
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const client = new OpenAI({
  baseURL: `http://127.0.0.1:${server.address().port}/v1`,
  apiKey: 'unused',
  maxRetries: 0,
});
const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }];

for (const family of Object.keys(fixtures)) {
  test(`${family}: the client's stream helper rebuilds the calls of the whole response`, async () => {
    const whole = fixtures[family].response.choices[0];
    const stream = client.chat.completions.stream({
      model: family,
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools,
    });
    const final = await stream.finalChatCompletion();
    const choice = final.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls');
    assert.equal(choice.message.content ?? null, whole.message.content);
    assert.deepEqual(
      choice.message.tool_calls.map(({ id, type, function: f }) => ({
        id, type, function: { name: f.name, arguments: f.arguments },
      })),
      whole.message.tool_calls,
    );
  });

  test(`${family}: raw chunks name the function before its arguments`, async () => {
    const stream = await client.chat.completions.create({
      model: family,
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools,
      stream: true,
    });
    const seen = new Map();
    for await (const chunk of stream) {
      for (const call of chunk.choices[0]?.delta?.tool_calls ?? []) {
        if (!seen.has(call.index)) {
          assert.ok(call.id && call.type === 'function' && call.function.name, JSON.stringify(call));
          seen.set(call.index, '');
        }
        seen.set(call.index, seen.get(call.index) + (call.function?.arguments ?? ''));
      }
    }
    assert.equal(seen.size, fixtures[family].response.choices[0].message.tool_calls.length);
    for (const [index, args] of seen) JSON.parse(args, `arguments of call ${index}`);
  });
}

test('close the fixture server', () => server.close());
