// The real JS readers of one batch of cases, one after another:
//
//   node readers.mjs JOBS.json RESULTS.jsonl
//
// JOBS.json is a list of jobs {key, reader, protocol, base, model, request}; for each job the
// reader sends the request (its `model` replaced, so the loopback upstream knows the case) to
// `base` and reads the stream with the library's own helper. One JSON line per job goes to
// RESULTS.jsonl (stdout is left to the libraries' own warnings):
//
//   {key, calls: [...], executed: [...], seen: [...], error: string|null}
//
// `calls`: what the reader ended with (the final message's calls; for @google/genai each
// chunk's `functionCalls`; for the AI SDK its valid `tool-call` parts); `executed`: the AI SDK
// tools' `execute` invocations; `seen`: calls in the helper's snapshot when it raised. A call
// is {name, namespace?, kind: "function"|"custom", arguments: JSON text as the reader parsed
// it (or {"unparsed": text}), raw?: the argument text the reader kept}.
// Runs from a folder whose node_modules holds the pinned packages (the runner copies it there).
import { appendFileSync, readFileSync, writeFileSync } from "node:fs";

import Anthropic from "@anthropic-ai/sdk";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { createOpenAI } from "@ai-sdk/openai";
import { GoogleGenAI } from "@google/genai";
import { jsonSchema, streamText, tool } from "ai";
import OpenAI from "openai";

const [jobsPath, resultsPath] = process.argv.slice(2);
const KEY = "sk-lockgate-interop-placeholder";
const TIMEOUT_MS = Number(process.env.LOCKGATE_READER_TIMEOUT_MS ?? 10000);

function parsedText(text) {
  // What a client gets from JSON.parse of an argument text, as JSON text again (NaN,
  // Infinity and big integers come back as JSON.stringify writes them).
  if (typeof text !== "string") return JSON.stringify(text ?? null);
  if (text === "") return "{}";
  try {
    return JSON.stringify(JSON.parse(text));
  } catch {
    return JSON.stringify({ unparsed: text });
  }
}

function call(name, args, extra = {}) {
  return { name: name ?? null, kind: "function", arguments: parsedText(args), ...extra };
}

function valueCall(name, value, extra = {}) {
  return { name: name ?? null, kind: "function", arguments: JSON.stringify(value ?? {}), ...extra };
}

function message(error) {
  const text = String(error?.message ?? error).replace(/\s+/g, " ");
  return `${error?.constructor?.name ?? "Error"}: ${text}`.slice(0, 300);
}

function sdkBody(request, model) {
  const body = { ...request, model };
  delete body.stream;
  return body;
}

// --- the official SDKs ----------------------------------------------------------------------

// A stream helper read to its end: the calls of what `finish()` gives, or, when it raises, the
// error and the calls of its snapshot then (`snapshot()`, where it has one).
async function toTheEnd(finish, snapshot, calls) {
  try {
    return { calls: calls(await finish()) };
  } catch (error) {
    let seen = [];
    try {
      seen = calls(snapshot());
    } catch {}
    return { error: message(error), seen };
  }
}

async function openaiChat(job) {
  const client = new OpenAI({ baseURL: `${job.base}/v1`, apiKey: KEY, maxRetries: 0 });
  const stream = client.chat.completions.stream(sdkBody(job.request, job.model), {
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  const fromMessage = (completion) =>
    (completion?.choices ?? []).flatMap((choice) =>
      (choice?.message?.tool_calls ?? []).map((c) =>
        call(c.function?.name, c.function?.arguments, { raw: c.function?.arguments ?? null }),
      ),
    );
  return toTheEnd(
    () => stream.finalChatCompletion(),
    () => stream.currentChatCompletionSnapshot,
    fromMessage,
  );
}

function responsesItemCall(item) {
  if (item?.type === "function_call") {
    const extra = { raw: item.arguments ?? null };
    if (item.namespace) extra.namespace = item.namespace;
    return call(item.name, item.arguments, extra);
  }
  if (item?.type === "custom_tool_call") {
    const extra = { kind: "custom", arguments: null, raw: item.input ?? null };
    if (item.namespace) extra.namespace = item.namespace;
    return { name: item.name ?? null, ...extra };
  }
  return null;
}

async function openaiResponses(job) {
  const client = new OpenAI({ baseURL: `${job.base}/v1`, apiKey: KEY, maxRetries: 0 });
  const seen = [];
  try {
    const stream = client.responses.stream(sdkBody(job.request, job.model), {
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
    for await (const event of stream) {
      if (event?.type === "response.output_item.done") {
        const found = responsesItemCall(event.item);
        if (found) seen.push(found);
      }
    }
    const final = await stream.finalResponse();
    return { calls: (final?.output ?? []).map(responsesItemCall).filter(Boolean) };
  } catch (error) {
    return { error: message(error), seen };
  }
}

async function anthropicMessages(job) {
  const client = new Anthropic({ baseURL: job.base, apiKey: KEY, maxRetries: 0 });
  const stream = client.messages.stream(sdkBody(job.request, job.model), {
    signal: AbortSignal.timeout(TIMEOUT_MS),
  });
  const fromMessage = (msg) =>
    (msg?.content ?? [])
      .filter((block) => block?.type === "tool_use")
      .map((block) => valueCall(block.name, block.input));
  return toTheEnd(() => stream.finalMessage(), () => stream.currentMessage, fromMessage);
}

function genaiConfig(request) {
  const config = { ...(request.generationConfig ?? {}) };
  for (const key of ["tools", "toolConfig", "systemInstruction", "safetySettings"]) {
    if (request[key] !== undefined) config[key] = request[key];
  }
  config.abortSignal = AbortSignal.timeout(TIMEOUT_MS);
  return config;
}

async function genai(job) {
  const ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: job.base } });
  const calls = [];
  try {
    const stream = await ai.models.generateContentStream({
      model: job.model,
      contents: job.request.contents ?? [],
      config: genaiConfig(job.request),
    });
    for await (const chunk of stream) {
      for (const fc of chunk.functionCalls ?? []) calls.push(valueCall(fc.name, fc.args));
    }
    return { calls };
  } catch (error) {
    return { error: message(error), seen: calls };
  }
}

// --- the Vercel AI SDK ----------------------------------------------------------------------

function lowerTypes(schema) {
  // Gemini's OpenAPI subset spells types in capitals ("OBJECT"); JSON Schema does not.
  if (Array.isArray(schema)) return schema.map(lowerTypes);
  if (schema === null || typeof schema !== "object") return schema;
  const out = {};
  for (const [key, value] of Object.entries(schema)) {
    out[key] = key === "type" && typeof value === "string" ? value.toLowerCase() : lowerTypes(value);
  }
  return out;
}

function declaredTools(protocol, request) {
  // [name, description, JSON schema] of every function tool the recording's request declares.
  const found = [];
  for (const t of request.tools ?? []) {
    if (protocol === "chat" && t?.type === "function" && t.function?.name) {
      found.push([t.function.name, t.function.description, t.function.parameters]);
    } else if (protocol === "responses" && t?.type === "function" && t.name) {
      found.push([t.name, t.description, t.parameters]);
    } else if (protocol === "anthropic" && t?.name && (t.type === undefined || t.type === "custom")) {
      found.push([t.name, t.description, t.input_schema]);
    } else if (protocol === "gemini") {
      for (const d of t?.functionDeclarations ?? t?.function_declarations ?? []) {
        const schema = d.parametersJsonSchema ?? d.parameters_json_schema ?? lowerTypes(d.parameters);
        found.push([d.name, d.description, schema]);
      }
    }
  }
  return found;
}

function aiModel(job) {
  const options = { apiKey: KEY };
  if (job.protocol === "anthropic") return createAnthropic({ ...options, baseURL: `${job.base}/v1` })(job.model);
  if (job.protocol === "gemini") {
    return createGoogleGenerativeAI({ ...options, baseURL: `${job.base}/v1beta` })(job.model);
  }
  const openai = createOpenAI({ ...options, baseURL: `${job.base}/v1` });
  return job.protocol === "chat" ? openai.chat(job.model) : openai.responses(job.model);
}

async function aiSdk(job) {
  const executed = [];
  const calls = [];
  const errors = [];
  const tools = {};
  for (const [name, description, schema] of declaredTools(job.protocol, job.request)) {
    tools[name] = tool({
      description: description ?? name,
      inputSchema: jsonSchema(schema && typeof schema === "object" ? schema : { type: "object" }),
      execute: async (input) => {
        executed.push(valueCall(name, input));
        return "done";
      },
    });
  }
  try {
    const result = streamText({
      model: aiModel(job),
      tools,
      prompt: "Use the tools.",
      maxRetries: 0,
      abortSignal: AbortSignal.timeout(TIMEOUT_MS),
    });
    for await (const part of result.fullStream) {
      if (part.type === "tool-call" && !part.invalid && !part.providerExecuted) {
        // (a provider-executed call, e.g. Gemini's own search, is the provider's to run)
        calls.push(valueCall(part.toolName, part.input));
      } else if (part.type === "error") {
        errors.push(message(part.error));
      }
    }
  } catch (error) {
    errors.push(message(error));
  }
  return { calls, executed, error: errors.length ? errors.join(" | ").slice(0, 400) : null };
}

const READERS = {
  "openai-node": (job) => (job.protocol === "chat" ? openaiChat(job) : openaiResponses(job)),
  "anthropic-node": anthropicMessages,
  "genai-node": genai,
  "ai-sdk": aiSdk,
};

const jobs = JSON.parse(readFileSync(jobsPath, "utf8"));
writeFileSync(resultsPath, "");
for (const job of jobs) {
  let result;
  try {
    result = await READERS[job.reader](job);
  } catch (error) {
    result = { error: `harness: ${message(error)}` };
  }
  const line = {
    key: job.key,
    calls: result.calls ?? [],
    executed: result.executed ?? [],
    seen: result.seen ?? [],
    error: result.error ?? null,
  };
  appendFileSync(resultsPath, JSON.stringify(line) + "\n");
}
