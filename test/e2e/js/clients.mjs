// The official JavaScript clients against a tidegpu gateway (argv[2]):
// the calls of test/e2e/clients_test.go, with the npm packages ollama and
// openai. Each check prints "ok <name>"; any failure throws (exit 1).
import assert from 'node:assert/strict';
import { Ollama } from 'ollama';
import OpenAI from 'openai';

const gateway = process.argv[2];
const model = 'qwen2:0.5b';
const weather = {
  type: 'object',
  properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const ok = (name) => console.log(`ok ${name}`);

function checkWeather(args) {
  const v = typeof args === 'string' ? JSON.parse(args) : args;
  assert.equal(Object.keys(v).length, 2, JSON.stringify(v));
  assert.equal(typeof v.city, 'string');
  assert.ok(v.city.length > 0);
  assert.ok(['celsius', 'fahrenheit'].includes(v.unit), JSON.stringify(v));
}

const ollama = new Ollama({ host: gateway });
const openai = new OpenAI({ baseURL: `${gateway}/v1`, apiKey: 'unused' });
const tool = { type: 'function', function: { name: 'get_weather', parameters: weather } };

// Ollama
{
  const r = await ollama.embed({ model, input: ['tide', 'moon'] });
  assert.equal(r.embeddings.length, 2);
  assert.ok(r.embeddings[0].length > 0);
  ok('ollama embed');
}
{
  const r = await ollama.chat({ model, messages: [{ role: 'user', content: 'get_weather for Tokyo' }], tools: [tool], stream: false });
  assert.equal(r.message.tool_calls.length, 1);
  assert.equal(r.message.tool_calls[0].function.name, 'get_weather');
  checkWeather(r.message.tool_calls[0].function.arguments);
  let calls = [];
  for await (const part of await ollama.chat({ model, messages: [{ role: 'user', content: 'get_weather for Tokyo' }], tools: [tool], stream: true })) {
    calls = calls.concat(part.message.tool_calls ?? []);
  }
  assert.equal(calls.length, 1);
  checkWeather(calls[0].function.arguments);
  ok('ollama tools');
}
{
  const r = await ollama.chat({ model, messages: [{ role: 'user', content: 'weather?' }], format: weather, stream: false });
  checkWeather(r.message.content);
  ok('ollama format');
}

// OpenAI
{
  const r = await openai.embeddings.create({ model, input: ['tide', 'moon'] });
  assert.equal(r.data.length, 2);
  assert.ok(r.data[1].embedding.length > 0);
  assert.ok(r.usage.prompt_tokens > 0);
  ok('openai embeddings');
}
let text;
{
  const r = await openai.responses.create({ model, input: 'What is a tide?' });
  assert.equal(r.status, 'completed');
  assert.ok(r.output_text.length > 0);
  text = r.output_text;
  ok('openai responses');
}
{
  let deltas = '';
  let completed;
  for await (const ev of await openai.responses.create({ model, input: 'What is a tide?', stream: true })) {
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    if (ev.type === 'response.completed') completed = ev.response;
  }
  assert.equal(deltas, text);
  assert.ok(completed.usage.output_tokens > 0);
  ok('openai responses stream');
}
{
  const r = await openai.responses.create({
    model, input: 'get_weather in Oslo', tools: [{ type: 'function', name: 'get_weather', parameters: weather, strict: true }],
  });
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, 'function_call');
  assert.equal(r.output[0].name, 'get_weather');
  checkWeather(r.output[0].arguments);
  ok('openai responses tools');
}
const toolParams = { model, messages: [{ role: 'user', content: 'get_weather for Paris' }], tools: [tool] };
let args;
{
  const r = await openai.chat.completions.create(toolParams);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.tool_calls.length, 1);
  args = r.choices[0].message.tool_calls[0].function.arguments;
  checkWeather(args);
  ok('openai tools');
}
{
  const stream = openai.chat.completions.stream(toolParams);
  const r = await stream.finalChatCompletion();
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_weather');
  assert.equal(r.choices[0].message.tool_calls[0].function.arguments, args);
  ok('openai tools stream');
}
{
  const r = await openai.chat.completions.create({
    model, messages: [{ role: 'user', content: 'weather?' }],
    response_format: { type: 'json_schema', json_schema: { name: 'weather', strict: true, schema: weather } },
  });
  checkWeather(r.choices[0].message.content);
  ok('openai json_schema');
}
let choices;
{
  const r = await openai.chat.completions.create({ model, n: 3, messages: [{ role: 'user', content: '写一首诗' }] });
  assert.equal(r.choices.length, 3);
  r.choices.forEach((c, i) => assert.equal(c.index, i));
  choices = r.choices.map((c) => c.message.content);
  ok('openai n');
}
{
  const got = ['', '', ''];
  let usage;
  for await (const chunk of await openai.chat.completions.create({
    model, n: 3, stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: '写一首诗' }],
  })) {
    for (const c of chunk.choices) got[c.index] += c.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.deepEqual(got, choices);
  assert.ok(usage.completion_tokens >= 3);
  ok('openai n stream');
}
console.log('all ok');
