// A client written by others: the TypeScript MCP SDK (@modelcontextprotocol/sdk)
// driving berth. tests/mcp runs it with node:
//
//   MCP_SDK_DIR=<dir with node_modules> node client.mjs http URL TOKEN [PLAN_URL]
//   MCP_SDK_DIR=<dir with node_modules> node client.mjs stdio BERTH ARG…
//
// It lists the tools, calls read, ast_grep, lsp and eval, answers an ask_user
// question by elicitation (choice "blue"), and with a plan endpoint calls
// write there. It prints one JSON object of what it saw and exits 0, or
// prints the error and exits 1.
import path from 'node:path';

const sdk = path.join(process.env.MCP_SDK_DIR, 'node_modules/@modelcontextprotocol/sdk/dist/esm');
const { Client } = await import(path.join(sdk, 'client/index.js'));
const { StreamableHTTPClientTransport } = await import(path.join(sdk, 'client/streamableHttp.js'));
const { StdioClientTransport } = await import(path.join(sdk, 'client/stdio.js'));
const { ElicitRequestSchema } = await import(path.join(sdk, 'types.js'));

const [mode, ...args] = process.argv.slice(2);

function newClient(elicited) {
  const c = new Client({ name: 'berth-ts-test', version: '1' }, { capabilities: { elicitation: { form: {} } } });
  c.setRequestHandler(ElicitRequestSchema, async (req) => {
    elicited.push(req.params.message);
    return { action: 'accept', content: { choice: 'blue' } };
  });
  return c;
}

function transport(kind, a) {
  if (kind === 'http') {
    return new StreamableHTTPClientTransport(new URL(a[0]), { requestInit: { headers: { Authorization: `Bearer ${a[1]}` } } });
  }
  return new StdioClientTransport({ command: a[0], args: a.slice(1), stderr: 'inherit' });
}

const text = (r) => (r.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('');

const out = { elicited: [] };
const timeout = { timeout: 120000 };
const client = newClient(out.elicited);
await client.connect(transport(mode, args));
const listed = (await client.listTools()).tools;
out.tools = listed.map((t) => t.name);
out.outputSchemas = listed.filter((t) => t.outputSchema).map((t) => t.name);
const calls = {
  read: { path: 'a.txt' },
  ast_grep: { pattern: 'add($A, $B)', language: 'python' },
  lsp: { action: 'hover', file: 'm.py', line: 5, symbol: 'add' },
  eval: { code: '6 * 7', description: 'multiply six by seven in the kernel' },
  ask_user: { question: 'Which colour?', options: [{ label: 'red' }, { label: 'blue' }] },
};
out.results = {};
for (const [name, a] of Object.entries(calls)) {
  const r = await client.callTool({ name, arguments: a }, undefined, timeout);
  // The SDK checks structuredContent against a listed outputSchema and
  // throws when it does not fit.
  out.results[name] = { text: text(r), isError: !!r.isError, structured: r.structuredContent !== undefined };
}
await client.close();

if (mode === 'http' && args[2]) {
  const plan = newClient([]);
  await plan.connect(transport('http', [args[2], args[1]]));
  out.planTools = (await plan.listTools()).tools.map((t) => t.name);
  try {
    const r = await plan.callTool({ name: 'write', arguments: { path: 'b.txt', content: 'x' } });
    out.planWrite = { result: text(r) };
  } catch (e) {
    out.planWrite = { code: e.code, message: e.message, data: e.data };
  }
  await plan.close();
}
console.log(JSON.stringify(out));
