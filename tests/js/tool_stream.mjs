// Streams a chat completion with a tool from a running Sidelight server and prints the
// assembled result of ChatCompletionStream.finalChatCompletion() as JSON.
// Usage: node tool_stream.mjs BASE_URL MODEL REQUEST_JSON
import OpenAI from "openai";

const [baseURL, model, requestJson] = process.argv.slice(2);
const request = JSON.parse(requestJson);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });
const stream = client.beta.chat.completions.stream({ model, stream: true, ...request });
const completion = await stream.finalChatCompletion();
process.stdout.write(JSON.stringify(completion));
