// The official TypeScript MCP SDK's client, against agentjournal's MCP server: an independent
// client (another language, another team's code) over stdio or streamable HTTP. Driven by
// test_mcp_typescript.py, which installs the SDK from npm and checks the report this prints.
//
// node ts_client.mjs '<json>' with {"npm_root", "session_id", and either "command", "args",
// "env" (stdio) or "url", "headers" (HTTP)}. Prints one JSON document: what each step returned.

import { pathToFileURL } from "node:url";
import { join } from "node:path";

const options = JSON.parse(process.argv[2]);
const sdk = join(options.npm_root, "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm");
const load = (path) => import(pathToFileURL(join(sdk, path)).href);
const { Client } = await load("client/index.js");

let transport;
if (options.url) {
  const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
  transport = new StreamableHTTPClientTransport(new URL(options.url), {
    requestInit: { headers: options.headers ?? {} },
  });
} else {
  const { StdioClientTransport } = await load("client/stdio.js");
  transport = new StdioClientTransport({
    command: options.command,
    args: options.args,
    env: options.env,
    stderr: "ignore",
  });
}

const client = new Client({ name: "agentjournal-ts-test", version: "1.0.0" });
const report = {};

// A call's outcome, whether the server answered with a result (isError or not) or the SDK threw
// (a protocol error, or structured content that does not match the tool's output schema).
async function call(name, args) {
  try {
    const result = await client.callTool({ name, arguments: args });
    const text = result.content.map((block) => block.text ?? "").join("");
    return { isError: result.isError === true, text, structured: result.structuredContent };
  } catch (error) {
    return { threw: String(error?.message ?? error) };
  }
}

await client.connect(transport);
try {
  report.server = client.getServerVersion()?.name;
  const sid = options.session_id;
  report.tools = (await client.listTools()).tools.map((tool) => ({
    name: tool.name,
    hasInputSchema: tool.inputSchema?.type === "object",
    hasOutputSchema: tool.outputSchema?.type === "object",
  }));
  report.search = await call("search", { query: "refund 4711", limit: 5 });
  report.list_sessions = await call("list_sessions", { search: "order 47" });
  report.read_session = await call("read_session", { session_id: sid, last: 2 });
  report.tool_calls = await call("tool_calls", { session_id: sid });
  report.replay = await call("replay", { session_id: sid, format: "openai" });
  report.resources = (await client.listResources()).resources.map((r) => r.uri);
  try {
    const read = await client.readResource({ uri: `agentjournal://sessions/${sid}` });
    report.transcript = read.contents.map((c) => ({ mimeType: c.mimeType, text: c.text }));
  } catch (error) {
    report.transcript = { threw: String(error?.message ?? error) };
  }
  try {
    const prompt = await client.getPrompt({
      name: "continue_session",
      arguments: { session_id: sid },
    });
    report.prompt = prompt.messages.map((m) => [m.role, m.content.text]);
  } catch (error) {
    report.prompt = { threw: String(error?.message ?? error) };
  }
  report.hostile = [
    await call("search", { query: 5 }),
    await call("search", { query: "x".repeat(1_000_000) }),
    await call("search", { query: '" OR 1=1; DROP TABLE events --' }),
    await call("read_session", { session_id: "../../etc/passwd" }),
    await call("no_such_tool", {}),
  ];
  report.still_serving = await call("list_sessions", {});
} finally {
  await client.close();
}
process.stdout.write(JSON.stringify(report) + "\n");
