// An OpenAI-compatible chat-completions host for the tests: it serves a real
// GGUF model through llama.cpp (node-llama-cpp's prebuilt runtime), and one
// process plays several hosts that differ the way real ones do. The host is
// chosen by the first path segment: POST /<host>/v1/chat/completions, where
// <host> is a "+"-joined list of behaviours:
//
//   grammar   honours response_format's json_schema as a grammar (llama-server)
//   prose     ignores response_format and answers prose (the default)
//   refuse    refuses a prompt that does not fit the context with llama-server's
//             400 exceed_context_size_error (the default)
//   truncate  keeps the end of a prompt that does not fit and answers (Ollama)
//   nousage   sends no usage object
//
// Generation is greedy (or sampled at --temperature with a fixed seed: the same
// request gets the same answer either way), on one thread, one request at a
// time, at most --max-tokens tokens a call (finish_reason "length" when cut
// there or at the end of the context). Every call is appended to --log as one JSON line:
// {host, status, prompt_tokens_sent, prompt_tokens, completion_tokens,
// finish_reason, usage_sent, ...}. Once it listens it prints one line,
// {"listening":"http://127.0.0.1:<port>"}, on standard output.
//
// Usage: node server.mjs --model stories260K.gguf --log calls.jsonl
//        [--port 0] [--ctx 512] [--max-tokens 96] [--temperature 0]
import fs from "node:fs";
import http from "node:http";
import {parseArgs} from "node:util";
import {getLlama, LlamaGrammarEvaluationState, LlamaLogLevel} from "node-llama-cpp";

const {values: opts} = parseArgs({
    options: {
        model: {type: "string"},
        log: {type: "string"},
        port: {type: "string", default: "0"},
        ctx: {type: "string", default: "512"},
        "max-tokens": {type: "string", default: "96"},
        temperature: {type: "string", default: "0"}
    }
});
if (!opts.model || !opts.log) {
    console.error("usage: node server.mjs --model FILE.gguf --log FILE [--port N] [--ctx N] [--max-tokens N] [--temperature T]");
    process.exit(2);
}
const contextSize = Number(opts.ctx);
const maxTokensCap = Number(opts["max-tokens"]);
const temperature = Number(opts.temperature);
const behaviours = new Set(["grammar", "prose", "refuse", "truncate", "nousage"]);

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false});
const model = await llama.loadModel({modelPath: opts.model, gpuLayers: 0});
const context = await model.createContext({contextSize, threads: 1, seed: 1});
const sequence = context.getSequence();
const grammars = new Map(); // schema text → grammar, built once each

// One call at a time: the model has one sequence.
let queue = Promise.resolve();
function serialised(fn) {
    const run = queue.then(fn);
    queue = run.catch(() => {});
    return run;
}

// host parses the path's host segment; null when it names no known behaviour.
function host(segment) {
    const names = segment.split("+");
    if (!names.every((n) => behaviours.has(n))) return null;
    const has = (n) => names.includes(n);
    return {name: segment, grammar: has("grammar"), truncate: has("truncate"), usage: !has("nousage")};
}

// promptText joins the messages' text; the model has no chat template.
function promptText(messages) {
    return messages.map((m) => {
        if (typeof m.content === "string") return m.content;
        return (m.content ?? []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
    }).join("\n\n");
}

async function grammarFor(responseFormat) {
    const schema = responseFormat?.json_schema?.schema;
    if (responseFormat?.type !== "json_schema" || !schema) return null;
    const key = JSON.stringify(schema);
    if (!grammars.has(key)) grammars.set(key, await llama.createGrammarForJsonSchema(schema));
    return grammars.get(key);
}

// complete runs one call on the model and returns [status, body, log entry].
async function complete(h, req) {
    const bos = model.tokens.bos == null ? [] : [model.tokens.bos];
    const sent = [...bos, ...model.tokenize(promptText(req.messages ?? []))];
    const requested = Number.isInteger(req.max_tokens) && req.max_tokens > 0 ? req.max_tokens : Infinity;
    const budget = Math.min(requested, maxTokensCap);
    const entry = {host: h.name, model: req.model, prompt_tokens_sent: sent.length, max_tokens: req.max_tokens ?? null,
        response_format: req.response_format?.json_schema?.name ?? null};
    let prompt = sent;
    if (sent.length >= contextSize) {
        if (!h.truncate) {
            const error = {code: 400, message: `request (${sent.length} tokens) exceeds the available context size (${contextSize} tokens)`,
                type: "exceed_context_size_error", n_prompt_tokens: sent.length, n_ctx: contextSize};
            return [400, {error}, {...entry, status: 400, prompt_tokens: 0, completion_tokens: 0, error: error.type}];
        }
        const keep = contextSize - Math.min(budget, contextSize / 2);
        prompt = [...bos, ...sent.slice(sent.length - keep + bos.length)];
    }
    const grammar = h.grammar ? await grammarFor(req.response_format) : null;
    const limit = Math.min(budget, contextSize - prompt.length);
    await sequence.clearHistory();
    const out = [];
    let finish = "length";
    if (limit > 0) {
        const evaluation = sequence.evaluate(prompt, {
            temperature,
            seed: 1,
            grammarEvaluationState: grammar ? new LlamaGrammarEvaluationState({model, grammar}) : undefined,
            yieldEogToken: true
        });
        for await (const token of evaluation) {
            if (model.isEogToken(token)) {
                finish = "stop";
                break;
            }
            out.push(token);
            // A JSON grammar ends in whitespace the grammar leaves open:
            // stop there, as node-llama-cpp's own chat session does.
            if (grammar && model.detokenize(out.slice(-8)).endsWith("\n\n\n\n")) {
                finish = "stop";
                break;
            }
            if (out.length >= limit) break;
        }
    }
    const usage = {prompt_tokens: prompt.length, completion_tokens: out.length, total_tokens: prompt.length + out.length};
    const body = {
        id: `chatcmpl-${Date.now().toString(36)}`, object: "chat.completion", created: Math.floor(Date.now() / 1000), model: req.model,
        choices: [{index: 0, message: {role: "assistant", content: grammar ? model.detokenize(out).trimEnd() : model.detokenize(out)}, finish_reason: finish}]
    };
    if (h.usage) body.usage = usage;
    return [200, body, {...entry, status: 200, prompt_tokens: prompt.length, completion_tokens: out.length,
        finish_reason: finish, grammar: grammar != null, usage_sent: h.usage}];
}

function send(res, status, body) {
    const text = JSON.stringify(body);
    res.writeHead(status, {"Content-Type": "application/json", "Content-Length": Buffer.byteLength(text)});
    res.end(text);
}

const server = http.createServer((req, res) => {
    const m = /^\/([a-z+]+)\/v1\/chat\/completions$/.exec(req.url);
    const h = m && host(m[1]);
    if (req.method !== "POST" || !h) {
        send(res, 404, {error: {code: 404, message: "POST /<host>/v1/chat/completions; <host>: grammar, prose, refuse, truncate, nousage joined by +", type: "not_found_error"}});
        return;
    }
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
        let body;
        try {
            body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        } catch {
            send(res, 400, {error: {code: 400, message: "the body is not JSON", type: "invalid_request_error"}});
            return;
        }
        if (body.stream) {
            send(res, 400, {error: {code: 400, message: "this test host does not stream", type: "invalid_request_error"}});
            return;
        }
        serialised(() => complete(h, body)).then(([status, out, entry]) => {
            fs.appendFileSync(opts.log, JSON.stringify(entry) + "\n");
            send(res, status, out);
        }, (err) => {
            fs.appendFileSync(opts.log, JSON.stringify({host: h.name, status: 500, error: String(err)}) + "\n");
            send(res, 500, {error: {code: 500, message: String(err), type: "server_error"}});
        });
    });
});
server.listen(Number(opts.port), "127.0.0.1", () => {
    console.log(JSON.stringify({listening: `http://127.0.0.1:${server.address().port}`}));
});
for (const signal of ["SIGTERM", "SIGINT"]) {
    process.on(signal, () => process.exit(0));
}
