// The OpenAI wire format without HTTP: request bodies parsed and validated into
// plain structs, and response bodies and stream chunks built from engine output.
// Every bad field throws HttpError(400) whose `param` names it (e.g.
// "messages[1].content[0].type"). Pure functions, so tests need no server.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "engine/chat_template.hpp"
#include "engine/engine.hpp"
#include "engine/grammar/grammar.hpp"
#include "engine/grammar/tool_calls.hpp"
#include "engine/sampler.hpp"

namespace inferd::daemon::openai {

enum class Api { Chat, Completions };

// role: system, user, assistant or tool ("developer" arrives as system).
using engine::ChatMessage;

// A completions prompt: text, or token ids used as they are.
struct Prompt {
  std::string text;
  std::vector<int32_t> tokens;  // non-empty: the prompt is these ids and `text` is unused
};

// What a chat request adds to its messages for the template: tools (each
// definition as JSON text; not with tool_choice none) and chat_template_kwargs.
struct ChatExtras {
  engine::ChatOptions template_options;
  bool parse_tool_calls = false;  // tools given and tool_choice not none: the output is searched for calls
  // vLLM's --tool-call-parser name the output is read with: the configured one,
  // else the chat template's; "hermes" whenever call_grammar writes the calls.
  std::string tool_call_parser;
  // vLLM's --reasoning-parser name: the configured one, else the chat template's
  // (empty: no reasoning split).
  std::string reasoning_parser;
  bool parallel_tool_calls = true;  // false: only the first call is returned
  // tool_choice required or a named function: the output is calls only, in this
  // grammar (engine/grammar/tool_calls.hpp); auto with a strict tool: free text
  // whose calls are held to it; null otherwise.
  std::shared_ptr<const engine::grammar::Grammar> call_grammar;
  bool calls_only = false;  // required or named: nothing but calls
  // With calls_only: the tools the calls may name, their arguments' grammars,
  // and 1 or -1 (no bound) calls, for a layout other than hermes (dsml_call_grammar).
  std::vector<engine::grammar::ToolGrammar> forced_tools;
  int max_calls = -1;
};

// The forced calls of `x` in DeepSeek's DSML, for a chat template whose tool
// format is `format` (deepseek_v4: <｜DSML｜tool_calls>, deepseek_v32:
// <｜DSML｜function_calls>), so the model writes calls as its template taught
// it; null for other formats, without forced calls, or where DSML cannot hold
// the arguments to their schemas (then they stay hermes).
std::shared_ptr<const engine::grammar::Grammar> dsml_call_grammar(const ChatExtras& x, std::string_view format);

// One /v1/chat/completions or /v1/completions request.
struct GenerateRequest {
  Api api = Api::Chat;
  std::string model;                  // empty: not named by the client
  std::vector<ChatMessage> messages;  // chat
  ChatExtras chat;                    // chat
  bool add_generation_prompt = true;  // chat
  std::vector<Prompt> prompts;        // completions: one or more (a batch)
  bool echo = false;                  // completions: the prompt text leads the output
  bool add_special_tokens = false;    // BOS/EOS around the text; chat: false, completions: true
  std::optional<int> max_tokens;      // empty: whatever the context has left
  int n = 1;                          // choices per prompt
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  engine::SamplingParams sampling;    // sampling.logprobs: -1, or alternatives per token
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  // response_format json_object / json_schema, or tool_choice required / named
  // (chat.call_grammar): the output's grammar; null for free text.
  std::shared_ptr<const engine::grammar::Grammar> grammar;

  bool logprobs() const { return sampling.logprobs >= 0; }
};

// Most choices one request may ask for (prompts x n).
inline constexpr int kMaxChoices = 128;

GenerateRequest parse_chat_request(const boost::json::object& body);
GenerateRequest parse_completion_request(const boost::json::object& body);

// POST /tokenize: {prompt} or {messages, add_generation_prompt}, add_special_tokens.
struct TokenizeRequest {
  std::string model;
  std::optional<std::string> prompt;
  std::vector<ChatMessage> messages;  // used when prompt is empty
  ChatExtras chat;                    // tools and chat_template_kwargs, as a chat request
  bool add_generation_prompt = true;
  bool add_special_tokens = true;     // default false for messages, as vLLM
};
TokenizeRequest parse_tokenize_request(const boost::json::object& body);
// POST /detokenize: {tokens}; ids must lie in [0, vocab_size).
std::vector<int32_t> parse_detokenize_request(const boost::json::object& body, size_t vocab_size);

boost::json::object tokenize_response(std::span<const int32_t> tokens, int max_model_len);
boost::json::object detokenize_response(std::string_view text);

// ---- responses ----

struct ResponseMeta {
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
};

// The bytes a token id stands for (special tokens included), for logprobs.
using TokenBytes = std::function<std::string(int32_t)>;

// A tool call as the response carries it. In a stream chunk a call comes as two
// deltas: id, type and name with empty arguments, then (id and name empty) the arguments.
struct ToolCall {
  int index = 0;  // the call's place among the choice's calls
  std::string id;  // "call_..."
  std::string name;
  std::string arguments;  // JSON text
};

// One choice, finished (a whole response) or in part (one stream chunk).
struct Choice {
  int index = 0;
  std::string text;  // the answer (chat: content)
  std::optional<std::vector<engine::TokenOut>> logprobs;  // nullopt: not asked for
  engine::FinishReason finish = engine::FinishReason::None;
  std::string stop_reason;  // the stop string that matched, if any
  std::string reasoning = {};  // chat: reasoning_content; empty: none
  std::vector<ToolCall> tool_calls = {};  // chat
  bool called = false;  // chat: the choice made tool calls, so a natural stop is "tool_calls"
};

// "stop", "length", "abort" (cancelled, as vLLM), or null while unfinished.
boost::json::value finish_reason_json(engine::FinishReason r);
boost::json::object usage_json(const engine::Usage& usage);

// Whole responses (object "chat.completion" / "text_completion").
boost::json::object chat_response(const ResponseMeta& meta, std::span<const Choice> choices,
                                  const engine::Usage& usage, const TokenBytes& bytes);
boost::json::object completion_response(const ResponseMeta& meta, std::span<const Choice> choices,
                                        const engine::Usage& usage, const TokenBytes& bytes);

// Stream chunks. A chat stream opens each choice with a chunk whose delta carries
// the assistant role; the chunk that finishes a choice carries finish_reason.
boost::json::object chat_role_chunk(const ResponseMeta& meta, int index);
boost::json::object chat_chunk(const ResponseMeta& meta, const Choice& delta, const TokenBytes& bytes);
// `text_offset`: where this chunk's text starts in the choice's whole text.
boost::json::object completion_chunk(const ResponseMeta& meta, const Choice& delta, size_t text_offset,
                                     const TokenBytes& bytes);
// The last chunk with stream_options.include_usage: no choices, the usage.
boost::json::object usage_chunk(const ResponseMeta& meta, Api api, const engine::Usage& usage);

// "data: <json>\n\n"
std::string sse_event(const boost::json::value& v);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// `s` with every invalid UTF-8 sequence replaced by U+FFFD, so JSON stays valid
// when a token ends inside a character.
std::string valid_utf8(std::string_view s);

}  // namespace inferd::daemon::openai
