// A minimal agent on the Vercel AI SDK, as its documentation writes one: `streamText` with
// one `bash` tool whose `execute` runs the command, a step limit, the default retries.
//
//   node ai_sdk_agent.mjs chat|responses|anthropic|bedrock|bedrock-anthropic BASE_URL "prompt"
//
// The key comes from HOSTILE_API_KEY (for `bedrock…`, a Bedrock API key: a bearer token).
// Runs from a folder whose node_modules holds `ai`, `@ai-sdk/openai` and `@ai-sdk/anthropic`,
// and for `bedrock` (ConverseStream) and `bedrock-anthropic` (InvokeModelWithResponseStream)
// `@ai-sdk/amazon-bedrock` (the runner copies this script into its cache folder).
// Prints every tool call, tool result, error and the text, one line each, then
// `finished: <reason>` or `failed: <error>`.
import { execSync } from "node:child_process";

import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { jsonSchema, stepCountIs, streamText, tool } from "ai";

const [flavour, baseURL, prompt] = process.argv.slice(2);
const apiKey = process.env.HOSTILE_API_KEY ?? "placeholder";

async function model() {
  if (flavour === "bedrock") {
    const { createAmazonBedrock } = await import("@ai-sdk/amazon-bedrock");
    const bedrock = createAmazonBedrock({ baseURL, region: "us-east-1", apiKey });
    return bedrock("us.anthropic.claude-sonnet-4-5-20250929-v1:0");
  }
  if (flavour === "bedrock-anthropic") {
    const { createAmazonBedrockAnthropic } = await import("@ai-sdk/amazon-bedrock/anthropic");
    const bedrock = createAmazonBedrockAnthropic({ baseURL, region: "us-east-1", apiKey });
    return bedrock("us.anthropic.claude-sonnet-4-5-20250929-v1:0");
  }
  if (flavour === "anthropic") {
    return createAnthropic({ baseURL, apiKey })("claude-sonnet-4-5");
  }
  const openai = createOpenAI({ baseURL, apiKey });
  return flavour === "chat" ? openai.chat("gpt-4.1-mini") : openai.responses("gpt-4.1-mini");
}

const bash = tool({
  description: "Run a shell command and return its output.",
  inputSchema: jsonSchema({
    type: "object",
    properties: { command: { type: "string", description: "The command to run." } },
    required: ["command"],
    additionalProperties: false,
  }),
  execute: async ({ command }) => {
    console.log(`running: ${command}`);
    try {
      return execSync(command, { encoding: "utf8", timeout: 10000 });
    } catch (error) {
      return `error: ${error.message}`;
    }
  },
});

try {
  const result = streamText({
    model: await model(),
    tools: { bash },
    stopWhen: stepCountIs(4),
    prompt,
  });
  for await (const part of result.fullStream) {
    if (part.type === "tool-call") {
      console.log(`tool-call: ${part.toolName} ${JSON.stringify(part.input)}`);
    } else if (part.type === "tool-result") {
      console.log(`tool-result: ${part.toolName}`);
    } else if (part.type === "tool-error") {
      console.log(`tool-error: ${part.toolName}: ${part.error}`);
    } else if (part.type === "error") {
      console.log(`error: ${part.error?.message ?? part.error}`);
    } else if (part.type === "text-delta") {
      process.stdout.write(part.text ?? part.delta ?? "");
    } else if (part.type === "finish") {
      console.log(`\nfinished: ${part.finishReason}`);
    }
  }
} catch (error) {
  console.log(`failed: ${error?.message ?? error}`);
  process.exitCode = 1;
}
