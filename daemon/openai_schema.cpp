#include "daemon/openai_schema.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

#include <boost/json/array.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "daemon/json_error.hpp"
#include "engine/grammar/json_schema.hpp"
#include "engine/grammar/tool_calls.hpp"

namespace inferd::daemon::openai {

namespace json = boost::json;

namespace {

// ---- reading fields ----

[[noreturn]] void invalid(std::string_view param, std::string message) {
  throw HttpError(400, std::move(message), {}, std::string(param));
}

// Not "quoted": with a std::string argument, ADL would find std::quoted.
std::string backticked(std::string_view param) { return "`" + std::string(param) + "`"; }

std::string kind_of(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "a boolean";
    case json::kind::int64:
    case json::kind::uint64: return "an integer";
    case json::kind::double_: return "a number";
    case json::kind::string: return "a string";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "?";
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// The field's value, or null when it is absent or JSON null (both mean "default").
const json::value* find(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  return it == o.end() || it->value().is_null() ? nullptr : &it->value();
}

bool as_bool(const json::value& v, std::string_view param) {
  if (!v.is_bool()) invalid(param, backticked(param) + " must be a boolean, got " + kind_of(v));
  return v.get_bool();
}

double as_number(const json::value& v, std::string_view param) {
  if (v.is_double()) {
    if (!std::isfinite(v.get_double())) invalid(param, backticked(param) + " must be a finite number");
    return v.get_double();
  }
  if (v.is_int64()) return static_cast<double>(v.get_int64());
  if (v.is_uint64()) return static_cast<double>(v.get_uint64());
  invalid(param, backticked(param) + " must be a number, got " + kind_of(v));
}

// Integers may arrive as 5 or 5.0 (some clients write every number as a float).
int64_t as_integer(const json::value& v, std::string_view param) {
  if (v.is_int64()) return v.get_int64();
  if (v.is_uint64()) {
    if (v.get_uint64() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      invalid(param, backticked(param) + " is too large");
    return static_cast<int64_t>(v.get_uint64());
  }
  if (v.is_double()) {
    const double d = v.get_double();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e15) return static_cast<int64_t>(d);
  }
  invalid(param, backticked(param) + " must be an integer, got " + kind_of(v));
}

std::string as_string(const json::value& v, std::string_view param) {
  if (!v.is_string()) invalid(param, backticked(param) + " must be a string, got " + kind_of(v));
  return std::string(v.get_string());
}

std::optional<bool> get_bool(const json::object& o, std::string_view key) {
  const json::value* v = find(o, key);
  return v ? std::optional(as_bool(*v, key)) : std::nullopt;
}
std::optional<double> get_number(const json::object& o, std::string_view key) {
  const json::value* v = find(o, key);
  return v ? std::optional(as_number(*v, key)) : std::nullopt;
}
std::optional<int64_t> get_integer(const json::object& o, std::string_view key) {
  const json::value* v = find(o, key);
  return v ? std::optional(as_integer(*v, key)) : std::nullopt;
}
std::optional<std::string> get_string(const json::object& o, std::string_view key) {
  const json::value* v = find(o, key);
  return v ? std::optional(as_string(*v, key)) : std::nullopt;
}

double number_in(const json::object& o, std::string_view key, double fallback, double lo, double hi,
                 bool lo_open = false) {
  const auto v = get_number(o, key);
  if (!v) return fallback;
  if (*v > hi || *v < lo || (lo_open && *v == lo))
    invalid(key, backticked(key) + " must be in " + (lo_open ? "(" : "[") + num(lo) + ", " +
                     (std::isinf(hi) ? "inf)" : num(hi) + "]") + ", got " + num(*v));
  return *v;
}

int64_t integer_in(const json::object& o, std::string_view key, int64_t fallback, int64_t lo, int64_t hi) {
  const auto v = get_integer(o, key);
  if (!v) return fallback;
  if (*v < lo || *v > hi)
    invalid(key, backticked(key) + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " +
                     std::to_string(*v));
  return *v;
}

int32_t token_id(const json::value& v, std::string_view param) {
  const int64_t id = as_integer(v, param);
  if (id < 0 || id > std::numeric_limits<int32_t>::max())
    invalid(param, backticked(param) + " must hold token ids (non-negative integers), got " + std::to_string(id));
  return static_cast<int32_t>(id);
}

std::vector<int32_t> token_ids(const json::array& a, std::string_view param) {
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    ids.push_back(token_id(a[i], std::string(param) + "[" + std::to_string(i) + "]"));
  return ids;
}

// ---- messages ----

std::string message_content(const json::object& m, const std::string& param, const std::string& role) {
  const json::value* c = find(m, "content");
  const std::string cparam = param + ".content";
  if (!c) {
    // An assistant turn that only called tools has no content.
    if (role == "assistant") return {};
    invalid(cparam, backticked(cparam) + " is required for role `" + role + "`");
  }
  if (c->is_string()) return std::string(c->get_string());
  if (!c->is_array())
    invalid(cparam, backticked(cparam) + " must be a string or an array of content parts, got " + kind_of(*c));
  std::string text;
  const json::array& parts = c->get_array();
  for (size_t j = 0; j < parts.size(); ++j) {
    const std::string pparam = cparam + "[" + std::to_string(j) + "]";
    if (!parts[j].is_object()) invalid(pparam, backticked(pparam) + " must be an object, got " + kind_of(parts[j]));
    const json::object& part = parts[j].get_object();
    const std::string tparam = pparam + ".type";
    const json::value* type = find(part, "type");
    if (!type) invalid(tparam, backticked(tparam) + " is required");
    const std::string t = as_string(*type, tparam);
    if (t != "text")
      invalid(tparam, "unsupported content part type `" + t + "`; this model accepts only `text` parts");
    const std::string xparam = pparam + ".text";
    const json::value* x = find(part, "text");
    if (!x) invalid(xparam, backticked(xparam) + " is required");
    // Parts are joined with newlines, as vLLM does.
    if (j > 0) text += '\n';
    text += as_string(*x, xparam);
  }
  return text;
}

void check_function_name(const std::string& name, const std::string& param);

// An assistant turn's tool_calls: [{"id", "type": "function", "function": {"name", "arguments"}}],
// arguments being the JSON text of an object, as the API returned it.
std::vector<engine::ChatToolCall> message_tool_calls(const json::object& m, const std::string& param) {
  const json::value* v = find(m, "tool_calls");
  if (!v) return {};
  const std::string tparam = param + ".tool_calls";
  if (!v->is_array()) invalid(tparam, backticked(tparam) + " must be an array, got " + kind_of(*v));
  std::vector<engine::ChatToolCall> out;
  const json::array& a = v->get_array();
  for (size_t j = 0; j < a.size(); ++j) {
    const std::string cparam = tparam + "[" + std::to_string(j) + "]";
    if (!a[j].is_object()) invalid(cparam, backticked(cparam) + " must be an object, got " + kind_of(a[j]));
    const json::object& c = a[j].get_object();
    if (const json::value* type = find(c, "type"); type && as_string(*type, cparam + ".type") != "function")
      invalid(cparam + ".type", backticked(cparam + ".type") + " must be `function`");
    if (const json::value* id = find(c, "id")) as_string(*id, cparam + ".id");
    const std::string fparam = cparam + ".function";
    const json::value* f = find(c, "function");
    if (!f) invalid(fparam, backticked(fparam) + " is required");
    if (!f->is_object()) invalid(fparam, backticked(fparam) + " must be an object, got " + kind_of(*f));
    const json::value* name = find(f->get_object(), "name");
    if (!name) invalid(fparam + ".name", backticked(fparam + ".name") + " is required");
    engine::ChatToolCall call{as_string(*name, fparam + ".name"), {}};
    check_function_name(call.name, fparam + ".name");
    const std::string aparam = fparam + ".arguments";
    const json::value* args = find(f->get_object(), "arguments");
    if (!args) invalid(aparam, backticked(aparam) + " is required");
    boost::system::error_code ec;
    const json::value parsed = json::parse(as_string(*args, aparam), ec);
    if (ec || !parsed.is_object()) invalid(aparam, backticked(aparam) + " must be the JSON text of an object");
    call.arguments = json::serialize(parsed);
    out.push_back(std::move(call));
  }
  return out;
}

std::vector<ChatMessage> parse_messages(const json::object& body) {
  const json::value* v = find(body, "messages");
  if (!v) invalid("messages", "`messages` is required");
  if (!v->is_array()) invalid("messages", "`messages` must be an array, got " + kind_of(*v));
  const json::array& a = v->get_array();
  if (a.empty()) invalid("messages", "`messages` must not be empty");
  std::vector<ChatMessage> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!a[i].is_object()) invalid(param, backticked(param) + " must be an object, got " + kind_of(a[i]));
    const json::object& m = a[i].get_object();
    const json::value* r = find(m, "role");
    if (!r) invalid(param + ".role", backticked(param + ".role") + " is required");
    std::string role = as_string(*r, param + ".role");
    if (role == "developer") role = "system";  // OpenAI's newer name for the system turn
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      invalid(param + ".role", "unknown role `" + role + "` in " + backticked(param + ".role") +
                                   "; expected system, developer, user, assistant or tool");
    ChatMessage msg{role, message_content(m, param, role)};
    if (role == "assistant") {
      msg.tool_calls = message_tool_calls(m, param);
      // An earlier turn's reasoning, as this server returns it (vLLM also takes `reasoning`).
      for (const char* key : {"reasoning_content", "reasoning"}) {
        const json::value* r = find(m, key);
        if (r && !r->is_null() && msg.reasoning_content.empty()) msg.reasoning_content = as_string(*r, param + "." + key);
      }
    }
    if (role == "tool") {
      const json::value* id = find(m, "tool_call_id");
      if (!id) invalid(param + ".tool_call_id", backticked(param + ".tool_call_id") + " is required for role `tool`");
      msg.tool_call_id = as_string(*id, param + ".tool_call_id");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// A function name as OpenAI allows it; it also needs no escaping in JSON.
void check_function_name(const std::string& name, const std::string& param) {
  const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  if (!ok)
    invalid(param, backticked(param) + " must be 1 to 64 characters of a-z, A-Z, 0-9, underscores, dots and dashes");
}

const json::object& object_field(const json::object& o, std::string_view key, const std::string& param) {
  const json::value* v = find(o, key);
  if (!v) invalid(param, backticked(param) + " is required");
  if (!v->is_object()) invalid(param, backticked(param) + " must be an object, got " + kind_of(*v));
  return v->get_object();
}

// One entry of `tools`, as parsed.
struct Tool {
  std::string text;  // the definition's JSON text, for the template
  std::string name;
  const json::value* parameters = nullptr;  // a schema object, or null (no parameters)
  bool strict = false;
  std::string param;  // "tools[i].function"
};

// tools: [{"type": "function", "function": {"name", "description", "parameters", "strict"}}].
std::vector<Tool> parse_tools(const json::object& body) {
  const json::value* v = find(body, "tools");
  if (!v) return {};
  if (!v->is_array()) invalid("tools", "`tools` must be an array, got " + kind_of(*v));
  const json::array& a = v->get_array();
  std::vector<Tool> out;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string param = "tools[" + std::to_string(i) + "]";
    if (!a[i].is_object()) invalid(param, backticked(param) + " must be an object, got " + kind_of(a[i]));
    const json::object& t = a[i].get_object();
    const json::value* type = find(t, "type");
    if (!type) invalid(param + ".type", backticked(param + ".type") + " is required");
    if (as_string(*type, param + ".type") != "function")
      invalid(param + ".type", backticked(param + ".type") + " must be `function`");
    Tool tool;
    tool.param = param + ".function";
    const std::string& fparam = tool.param;
    const json::object& f = object_field(t, "function", fparam);
    const json::value* name = find(f, "name");
    if (!name) invalid(fparam + ".name", backticked(fparam + ".name") + " is required");
    tool.name = as_string(*name, fparam + ".name");
    check_function_name(tool.name, fparam + ".name");
    if (std::any_of(out.begin(), out.end(), [&](const Tool& x) { return x.name == tool.name; }))
      invalid(fparam + ".name", "two tools are named `" + tool.name + "`");
    if (const json::value* d = find(f, "description")) as_string(*d, fparam + ".description");
    tool.parameters = find(f, "parameters");
    if (tool.parameters && !tool.parameters->is_object())
      invalid(fparam + ".parameters", backticked(fparam + ".parameters") + " must be a JSON schema object, got " +
                                          kind_of(*tool.parameters));
    if (const json::value* st = find(f, "strict")) tool.strict = as_bool(*st, fparam + ".strict");
    tool.text = json::serialize(a[i]);
    out.push_back(std::move(tool));
  }
  return out;
}

enum class ToolChoice { None, Auto, Required, Named };

// tool_choice: "none", "auto", "required" or {"type": "function", "function":
// {"name": ...}} naming one of `tools`; `named` gets that name.
ToolChoice parse_tool_choice(const json::object& body, const std::vector<Tool>& tools, std::string& named) {
  const json::value* v = find(body, "tool_choice");
  if (!v) return tools.empty() ? ToolChoice::None : ToolChoice::Auto;
  if (v->is_object()) {
    const json::object& o = v->get_object();
    const json::value* type = find(o, "type");
    if (!type) invalid("tool_choice.type", "`tool_choice.type` is required");
    if (as_string(*type, "tool_choice.type") != "function")
      invalid("tool_choice.type", "`tool_choice.type` must be `function`");
    const json::object& f = object_field(o, "function", "tool_choice.function");
    const json::value* name = find(f, "name");
    if (!name) invalid("tool_choice.function.name", "`tool_choice.function.name` is required");
    named = as_string(*name, "tool_choice.function.name");
    if (std::none_of(tools.begin(), tools.end(), [&](const Tool& t) { return t.name == named; }))
      invalid("tool_choice", "`tool_choice` names the function `" + named + "`, which is not among `tools`");
    return ToolChoice::Named;
  }
  if (!v->is_string())
    invalid("tool_choice", "`tool_choice` must be `none`, `auto`, `required` or an object, got " + kind_of(*v));
  const std::string c(v->get_string());
  if (c == "none") return ToolChoice::None;
  if (c != "auto" && c != "required")
    invalid("tool_choice", "`tool_choice` must be `none`, `auto`, `required` or an object, got `" + c + "`");
  if (tools.empty()) invalid("tool_choice", "`tool_choice` `" + c + "` needs `tools`");
  return c == "auto" ? ToolChoice::Auto : ToolChoice::Required;
}

// The tools calls may name (all, or only `named`), each with its
// arguments compiled from its parameters; what the compiler cannot enforce
// is refused naming the field below `parameters`. `in_text` (auto): free text
// around the calls, and only strict tools' arguments held to their schema
// (the others' to any JSON object).
std::vector<engine::grammar::ToolGrammar> call_tools(const std::vector<Tool>& tools, const std::string& named,
                                                     bool in_text) {
  namespace g = engine::grammar;
  std::vector<g::ToolGrammar> calls;
  for (const Tool& t : tools) {
    if (!named.empty() && t.name != named) continue;
    if (in_text && !t.strict) {
      calls.push_back({t.name, g::any_json_object()});
      continue;
    }
    // No parameters: the function takes none, so its arguments are {}.
    static const json::value kNone = json::object{{"type", "object"}, {"additionalProperties", false}};
    const json::value& schema = t.parameters ? *t.parameters : kNone;
    const std::string pparam = t.param + ".parameters";
    try {
      calls.push_back({t.name, g::compile_json_schema(schema, t.strict)});
    } catch (const g::SchemaError& e) {
      const std::string param = pparam + (e.path.empty() ? "" : "." + e.path);
      invalid(param, backticked(param) + ": " + e.what());
    }
    if (calls.back().parameters.nodes[static_cast<size_t>(calls.back().parameters.root)].kind != g::Kind::Object)
      invalid(pparam, backticked(pparam) + " must describe an object (the arguments of a call)");
  }
  if (calls.size() > static_cast<size_t>(g::kMaxChoices))
    invalid("tools", "constrained tool calls (`tool_choice` `required`, a named function or a strict tool) "
                     "take at most " + std::to_string(g::kMaxChoices) + " tools");
  return calls;
}

ChatExtras parse_chat_extras(const json::object& body) {
  ChatExtras x;
  std::vector<Tool> tools = parse_tools(body);
  std::string named;
  const ToolChoice choice = parse_tool_choice(body, tools, named);
  x.parse_tool_calls = choice != ToolChoice::None;
  x.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
  // A named function is one call; required is one or more (one without parallel calls).
  x.calls_only = choice == ToolChoice::Required || choice == ToolChoice::Named;
  namespace g = engine::grammar;
  if (x.calls_only) {
    x.forced_tools = call_tools(tools, named, false);
    x.max_calls = choice == ToolChoice::Named || !x.parallel_tool_calls ? 1 : -1;
    x.call_grammar = std::make_shared<const g::Grammar>(g::tool_calls_grammar(x.forced_tools, 1, x.max_calls));
  }
  // auto: the text is free, but a call the model writes to a strict tool is held to its schema.
  if (choice == ToolChoice::Auto && std::any_of(tools.begin(), tools.end(), [](const Tool& t) { return t.strict; }))
    x.call_grammar = std::make_shared<const g::Grammar>(g::tool_calls_in_text_grammar(call_tools(tools, {}, true)));
  // tool_choice none: the model is not told about the tools at all.
  if (x.parse_tool_calls)
    for (Tool& t : tools) x.template_options.tools.push_back(std::move(t.text));
  if (const json::value* k = find(body, "chat_template_kwargs")) {
    if (!k->is_object())
      invalid("chat_template_kwargs", "`chat_template_kwargs` must be an object, got " + kind_of(*k));
    // DeepSeek's templates name the switch `thinking`, Qwen3's `enable_thinking`:
    // either turns thinking on (as vLLM's deepseek_v4 reads them).
    for (std::string_view key : {"enable_thinking", "thinking"})
      if (const json::value* t = find(k->get_object(), key)) {
        const bool on = as_bool(*t, "chat_template_kwargs." + std::string(key));
        x.template_options.enable_thinking = x.template_options.enable_thinking.value_or(false) || on;
      }
  }
  // OpenAI's reasoning_effort, with vLLM's "max": "none" turns thinking off (the
  // template and the reasoning parser alike), the others reach the template.
  if (auto effort = get_string(body, "reasoning_effort")) {
    static constexpr std::string_view kEfforts[] = {"none", "minimal", "low", "medium", "high", "max"};
    if (std::find(std::begin(kEfforts), std::end(kEfforts), *effort) == std::end(kEfforts))
      invalid("reasoning_effort", "`reasoning_effort` must be none, minimal, low, medium, high or max, got '" +
                                      *effort + "'");
    if (*effort == "none") x.template_options.enable_thinking = false;
    x.template_options.reasoning_effort = std::move(*effort);
  }
  return x;
}

// ---- common generation fields ----

// Fields this server does not implement: refusing them beats silently ignoring them.
void reject_unsupported(const json::object& body) {
  if (const json::value* v = find(body, "logit_bias"); v && !(v->is_object() && v->get_object().empty()))
    invalid("logit_bias", "`logit_bias` is not supported by this server");
  if (const json::value* v = find(body, "suffix"); v && !(v->is_string() && v->get_string().empty()))
    invalid("suffix", "`suffix` is not supported by this server");
  if (find(body, "prompt_logprobs"))
    invalid("prompt_logprobs", "`prompt_logprobs` is not supported by this server");
  if (get_integer(body, "min_tokens").value_or(0) > 0)
    invalid("min_tokens", "`min_tokens` is not supported by this server");
}

// response_format: text (no grammar), json_object (any object) or json_schema
// (the schema's grammar, engine/grammar/json_schema.hpp). What the schema
// compiler cannot enforce is refused, naming the field below json_schema.schema.
std::shared_ptr<const engine::grammar::Grammar> parse_response_format(const json::object& body) {
  const json::value* v = find(body, "response_format");
  if (!v) return nullptr;
  if (!v->is_object()) invalid("response_format", "`response_format` must be an object, got " + kind_of(*v));
  const json::object& rf = v->get_object();
  const json::value* t = find(rf, "type");
  if (!t) invalid("response_format.type", "`response_format.type` is required");
  const std::string type = as_string(*t, "response_format.type");
  if (type == "text") return nullptr;
  if (type == "json_object") return std::make_shared<const engine::grammar::Grammar>(engine::grammar::any_json_object());
  if (type != "json_schema")
    invalid("response_format.type", "unknown `response_format.type` `" + type +
                                        "`; expected `text`, `json_object` or `json_schema`");
  const json::value* js = find(rf, "json_schema");
  if (!js) invalid("response_format.json_schema", "`response_format.json_schema` is required for type `json_schema`");
  if (!js->is_object())
    invalid("response_format.json_schema", "`response_format.json_schema` must be an object, got " + kind_of(*js));
  const json::object& spec = js->get_object();
  if (const json::value* name = find(spec, "name")) as_string(*name, "response_format.json_schema.name");
  const bool strict = [&] {
    const json::value* s = find(spec, "strict");
    return s && as_bool(*s, "response_format.json_schema.strict");
  }();
  const json::value* schema = find(spec, "schema");
  // No schema: any JSON object, as OpenAI reads it.
  if (!schema) return std::make_shared<const engine::grammar::Grammar>(engine::grammar::any_json_object());
  try {
    return std::make_shared<const engine::grammar::Grammar>(engine::grammar::compile_json_schema(*schema, strict));
  } catch (const engine::grammar::SchemaError& e) {
    const std::string param = "response_format.json_schema.schema" + (e.path.empty() ? "" : "." + e.path);
    invalid(param, backticked(param) + ": " + e.what());
  }
}

void parse_common(const json::object& body, GenerateRequest& r) {
  reject_unsupported(body);
  r.grammar = parse_response_format(body);
  if (auto m = get_string(body, "model")) r.model = *m;

  r.n = static_cast<int>(integer_in(body, "n", 1, 1, kMaxChoices));
  if (auto best_of = get_integer(body, "best_of"); best_of && *best_of != r.n)
    invalid("best_of", "`best_of` other than `n` is not supported by this server");

  r.stream = get_bool(body, "stream").value_or(false);
  if (const json::value* so = find(body, "stream_options")) {
    if (!r.stream) invalid("stream_options", "`stream_options` is only allowed when `stream` is true");
    if (!so->is_object()) invalid("stream_options", "`stream_options` must be an object, got " + kind_of(*so));
    const json::value* iu = find(so->get_object(), "include_usage");
    r.include_usage = iu && as_bool(*iu, "stream_options.include_usage");
  }

  // The OpenAI defaults, stated here so they do not depend on the engine's.
  auto& s = r.sampling;
  constexpr double inf = std::numeric_limits<double>::infinity();
  s.temperature = static_cast<float>(number_in(body, "temperature", 1.0, 0.0, inf));
  s.top_p = static_cast<float>(number_in(body, "top_p", 1.0, 0.0, 1.0, /*lo_open=*/true));
  // -1 and 0 both mean "no top-k", as in vLLM.
  const int64_t top_k = integer_in(body, "top_k", 0, -1, std::numeric_limits<int32_t>::max());
  s.top_k = static_cast<int>(std::max<int64_t>(0, top_k));
  s.min_p = static_cast<float>(number_in(body, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = static_cast<float>(number_in(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(number_in(body, "frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty = static_cast<float>(number_in(body, "repetition_penalty", 1.0, 0.0, inf, /*lo_open=*/true));
  if (auto seed = get_integer(body, "seed")) s.seed = static_cast<uint64_t>(*seed);
  s.logprobs = -1;

  if (const json::value* v = find(body, "stop")) {
    if (v->is_string()) {
      r.stop.emplace_back(v->get_string());
    } else if (v->is_array()) {
      const json::array& a = v->get_array();
      for (size_t i = 0; i < a.size(); ++i) r.stop.push_back(as_string(a[i], "stop[" + std::to_string(i) + "]"));
    } else {
      invalid("stop", "`stop` must be a string or an array of strings, got " + kind_of(*v));
    }
    for (const auto& st : r.stop)
      if (st.empty()) invalid("stop", "`stop` strings must not be empty");
  }
  if (const json::value* v = find(body, "stop_token_ids")) {
    if (!v->is_array()) invalid("stop_token_ids", "`stop_token_ids` must be an array of token ids, got " + kind_of(*v));
    r.stop_token_ids = token_ids(v->get_array(), "stop_token_ids");
  }
  r.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  r.skip_special_tokens = get_bool(body, "skip_special_tokens").value_or(true);
}

std::optional<int> max_tokens_field(const json::object& body, std::string_view key) {
  const auto v = get_integer(body, key);
  if (!v) return std::nullopt;
  if (*v < 1) invalid(key, backticked(key) + " must be at least 1, got " + std::to_string(*v));
  return static_cast<int>(std::min<int64_t>(*v, std::numeric_limits<int32_t>::max()));
}

std::vector<Prompt> parse_prompts(const json::object& body) {
  const json::value* v = find(body, "prompt");
  if (!v) invalid("prompt", "`prompt` is required");
  auto text_prompt = [](const json::value& x, std::string_view param) {
    Prompt p;
    p.text = as_string(x, param);
    if (p.text.empty()) invalid(param, backticked(param) + " must not be empty");
    return p;
  };
  if (v->is_string()) return {text_prompt(*v, "prompt")};
  if (!v->is_array())
    invalid("prompt", "`prompt` must be a string, an array of strings or an array of token ids, got " + kind_of(*v));
  const json::array& a = v->get_array();
  if (a.empty()) invalid("prompt", "`prompt` must not be empty");
  std::vector<Prompt> out;
  if (a[0].is_number()) {
    out.push_back({{}, token_ids(a, "prompt")});
    return out;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string param = "prompt[" + std::to_string(i) + "]";
    if (a[i].is_string()) {
      out.push_back(text_prompt(a[i], param));
    } else if (a[i].is_array() && !a[i].get_array().empty()) {
      out.push_back({{}, token_ids(a[i].get_array(), param)});
    } else {
      invalid(param, backticked(param) + " must be a non-empty string or array of token ids, got " + kind_of(a[i]));
    }
  }
  return out;
}

// ---- building responses ----

constexpr double kMinLogprob = -9999.0;  // JSON has no -inf; vLLM clamps the same way

double clamp_logprob(float lp) { return std::isfinite(lp) ? std::max<double>(lp, kMinLogprob) : kMinLogprob; }

json::array byte_values(std::string_view s) {
  json::array a;
  a.reserve(s.size());
  for (unsigned char c : s) a.emplace_back(static_cast<int64_t>(c));
  return a;
}

json::object chat_logprob(int32_t id, float lp, const TokenBytes& bytes) {
  const std::string raw = bytes(id);
  return {{"token", valid_utf8(raw)}, {"logprob", clamp_logprob(lp)}, {"bytes", byte_values(raw)}};
}

json::value chat_logprobs(const Choice& c, const TokenBytes& bytes) {
  if (!c.logprobs) return nullptr;
  json::array content;
  for (const auto& t : *c.logprobs) {
    json::object entry = chat_logprob(t.id, t.logprob, bytes);
    json::array top;
    for (const auto& [id, lp] : t.top) top.push_back(chat_logprob(id, lp, bytes));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return json::object{{"content", std::move(content)}};
}

// The legacy completions shape: parallel arrays; each top_logprobs entry maps
// token text to logprob and includes the sampled token, as vLLM does.
json::value completion_logprobs(const Choice& c, size_t text_offset, const TokenBytes& bytes) {
  if (!c.logprobs) return nullptr;
  json::array tokens, token_logprobs, top_logprobs, offsets;
  size_t offset = text_offset;
  for (const auto& t : *c.logprobs) {
    const std::string text = valid_utf8(bytes(t.id));
    tokens.emplace_back(text);
    token_logprobs.emplace_back(clamp_logprob(t.logprob));
    json::object top;
    top[text] = clamp_logprob(t.logprob);
    for (const auto& [id, lp] : t.top) top.emplace(valid_utf8(bytes(id)), clamp_logprob(lp));
    top_logprobs.push_back(std::move(top));
    offsets.emplace_back(static_cast<uint64_t>(offset));
    offset += text.size();
  }
  return json::object{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(token_logprobs)},
                      {"top_logprobs", std::move(top_logprobs)},
                      {"text_offset", std::move(offsets)}};
}

json::value stop_reason_json(const Choice& c) {
  return c.stop_reason.empty() ? json::value(nullptr) : json::value(valid_utf8(c.stop_reason));
}

// "tool_calls" for a choice that called tools and stopped by itself, as vLLM.
json::value chat_finish_json(const Choice& c) {
  if (c.called && c.finish == engine::FinishReason::Stop) return "tool_calls";
  return finish_reason_json(c.finish);
}

json::object tool_call_json(const ToolCall& t, bool chunk) {
  json::object function;
  if (!t.name.empty()) function["name"] = t.name;
  function["arguments"] = valid_utf8(t.arguments);
  json::object out;
  if (chunk) out["index"] = t.index;
  if (!t.id.empty()) {
    out["id"] = t.id;
    out["type"] = "function";
  }
  out["function"] = std::move(function);
  return out;
}

json::array tool_calls_json(const Choice& c, bool chunk) {
  json::array a;
  for (const ToolCall& t : c.tool_calls) a.push_back(tool_call_json(t, chunk));
  return a;
}

json::object envelope(const ResponseMeta& meta, std::string_view object) {
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

std::shared_ptr<const engine::grammar::Grammar> dsml_call_grammar(const ChatExtras& x, std::string_view format) {
  if (!x.calls_only || (format != "deepseek_v4" && format != "deepseek_v32")) return nullptr;
  try {
    return std::make_shared<const engine::grammar::Grammar>(engine::grammar::dsml_tool_calls_grammar(
        x.forced_tools, x.max_calls, format == "deepseek_v4" ? "tool_calls" : "function_calls"));
  } catch (const std::invalid_argument&) {
    return nullptr;  // arguments DSML cannot hold (free keys): hermes
  }
}

GenerateRequest parse_chat_request(const json::object& body) {
  GenerateRequest r;
  r.api = Api::Chat;
  r.messages = parse_messages(body);
  parse_common(body, r);
  r.chat = parse_chat_extras(body);
  if (r.chat.call_grammar) {
    if (r.grammar)
      invalid("response_format", "`response_format` other than `text` cannot be combined with `tool_choice` "
                                 "`required`, a named function or a strict tool: the output is held to the calls' "
                                 "grammar");
    r.grammar = r.chat.call_grammar;
  }
  // Some models' <tool_call> tags are special tokens: skipping those would hide
  // the calls from the parser (vLLM's hermes parser does the same).
  if (r.chat.parse_tool_calls) r.skip_special_tokens = false;
  r.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
  r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(false);
  // max_completion_tokens is the current name; max_tokens the deprecated one.
  r.max_tokens = max_tokens_field(body, "max_completion_tokens");
  if (!r.max_tokens) r.max_tokens = max_tokens_field(body, "max_tokens");

  const bool logprobs = get_bool(body, "logprobs").value_or(false);
  const auto top = integer_in(body, "top_logprobs", 0, 0, engine::kMaxLogprobs);
  if (top > 0 && !logprobs) invalid("top_logprobs", "`top_logprobs` needs `logprobs` set to true");
  if (logprobs) r.sampling.logprobs = static_cast<int>(top);
  return r;
}

GenerateRequest parse_completion_request(const json::object& body) {
  GenerateRequest r;
  r.api = Api::Completions;
  r.prompts = parse_prompts(body);
  parse_common(body, r);
  for (std::string_view chat_only : {"tools", "tool_choice"})
    if (find(body, chat_only))
      invalid(chat_only, backticked(chat_only) + " is only supported in /v1/chat/completions");
  if (r.prompts.size() * static_cast<size_t>(r.n) > static_cast<size_t>(kMaxChoices))
    invalid("n", "`n` times the number of prompts must be at most " + std::to_string(kMaxChoices));
  r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(true);
  r.max_tokens = max_tokens_field(body, "max_tokens");
  r.echo = get_bool(body, "echo").value_or(false);

  if (const json::value* v = find(body, "logprobs")) {
    if (v->is_bool()) invalid("logprobs", "`logprobs` must be an integer (alternatives per token) in /v1/completions");
    r.sampling.logprobs = static_cast<int>(integer_in(body, "logprobs", 0, 0, engine::kMaxLogprobs));
  }
  if (r.echo && r.logprobs()) invalid("echo", "`echo` together with `logprobs` is not supported by this server");
  return r;
}

TokenizeRequest parse_tokenize_request(const json::object& body) {
  TokenizeRequest r;
  if (auto m = get_string(body, "model")) r.model = *m;
  const bool has_prompt = find(body, "prompt") != nullptr;
  const bool has_messages = find(body, "messages") != nullptr;
  if (has_prompt == has_messages) invalid("prompt", "exactly one of `prompt` or `messages` is required");
  if (has_prompt) {
    r.prompt = *get_string(body, "prompt");
  } else {
    r.messages = parse_messages(body);
    r.chat = parse_chat_extras(body);
    r.add_special_tokens = false;
    r.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
  }
  r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(r.add_special_tokens);
  return r;
}

std::vector<int32_t> parse_detokenize_request(const json::object& body, size_t vocab_size) {
  const json::value* v = find(body, "tokens");
  if (!v) invalid("tokens", "`tokens` is required");
  if (!v->is_array()) invalid("tokens", "`tokens` must be an array of token ids, got " + kind_of(*v));
  std::vector<int32_t> ids = token_ids(v->get_array(), "tokens");
  for (size_t i = 0; i < ids.size(); ++i)
    if (static_cast<size_t>(ids[i]) >= vocab_size)
      invalid("tokens", "`tokens[" + std::to_string(i) + "]` = " + std::to_string(ids[i]) +
                            " is outside the vocabulary of " + std::to_string(vocab_size) + " tokens");
  return ids;
}

json::object tokenize_response(std::span<const int32_t> tokens, int max_model_len) {
  json::array ids;
  ids.reserve(tokens.size());
  for (int32_t t : tokens) ids.emplace_back(static_cast<int64_t>(t));
  return {{"count", static_cast<int64_t>(tokens.size())}, {"max_model_len", max_model_len}, {"tokens", std::move(ids)}};
}

json::object detokenize_response(std::string_view text) { return {{"prompt", valid_utf8(text)}}; }

json::value finish_reason_json(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::Stop: return "stop";
    case engine::FinishReason::Length: return "length";
    case engine::FinishReason::Cancelled:
    case engine::FinishReason::Error: return "abort";
    case engine::FinishReason::None: break;
  }
  return nullptr;
}

json::object usage_json(const engine::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", json::object{{"cached_tokens", u.cached_tokens}}}};
}

json::object chat_response(const ResponseMeta& meta, std::span<const Choice> choices, const engine::Usage& usage,
                           const TokenBytes& bytes) {
  json::object out = envelope(meta, "chat.completion");
  json::array arr;
  for (const auto& c : choices) {
    json::object message{{"role", "assistant"}};
    // A turn that only called tools has no content, as OpenAI answers it.
    if (c.tool_calls.empty() || !c.text.empty()) message["content"] = valid_utf8(c.text);
    else message["content"] = nullptr;
    if (!c.reasoning.empty()) message["reasoning_content"] = valid_utf8(c.reasoning);
    if (!c.tool_calls.empty()) message["tool_calls"] = tool_calls_json(c, false);
    arr.push_back(json::object{
        {"index", c.index},
        {"message", std::move(message)},
        {"logprobs", chat_logprobs(c, bytes)},
        {"finish_reason", chat_finish_json(c)},
        {"stop_reason", stop_reason_json(c)},
    });
  }
  out["choices"] = std::move(arr);
  out["usage"] = usage_json(usage);
  return out;
}

json::object completion_response(const ResponseMeta& meta, std::span<const Choice> choices,
                                 const engine::Usage& usage, const TokenBytes& bytes) {
  json::object out = envelope(meta, "text_completion");
  json::array arr;
  for (const auto& c : choices) {
    arr.push_back(json::object{
        {"index", c.index},
        {"text", valid_utf8(c.text)},
        {"logprobs", completion_logprobs(c, 0, bytes)},
        {"finish_reason", finish_reason_json(c.finish)},
        {"stop_reason", stop_reason_json(c)},
    });
  }
  out["choices"] = std::move(arr);
  out["usage"] = usage_json(usage);
  return out;
}

json::object chat_role_chunk(const ResponseMeta& meta, int index) {
  json::object out = envelope(meta, "chat.completion.chunk");
  out["choices"] = json::array{json::object{{"index", index},
                                            {"delta", json::object{{"role", "assistant"}, {"content", ""}}},
                                            {"logprobs", nullptr},
                                            {"finish_reason", nullptr}}};
  return out;
}

json::object chat_chunk(const ResponseMeta& meta, const Choice& delta, const TokenBytes& bytes) {
  json::object out = envelope(meta, "chat.completion.chunk");
  json::object d;
  if (!delta.reasoning.empty()) d["reasoning_content"] = valid_utf8(delta.reasoning);
  if (!delta.text.empty() || (delta.reasoning.empty() && delta.tool_calls.empty()))
    d["content"] = valid_utf8(delta.text);
  if (!delta.tool_calls.empty()) d["tool_calls"] = tool_calls_json(delta, true);
  json::object choice{{"index", delta.index},
                      {"delta", std::move(d)},
                      {"logprobs", chat_logprobs(delta, bytes)},
                      {"finish_reason", chat_finish_json(delta)}};
  if (delta.finish != engine::FinishReason::None) choice["stop_reason"] = stop_reason_json(delta);
  out["choices"] = json::array{std::move(choice)};
  return out;
}

json::object completion_chunk(const ResponseMeta& meta, const Choice& delta, size_t text_offset,
                              const TokenBytes& bytes) {
  json::object out = envelope(meta, "text_completion");
  json::object choice{{"index", delta.index},
                      {"text", valid_utf8(delta.text)},
                      {"logprobs", completion_logprobs(delta, text_offset, bytes)},
                      {"finish_reason", finish_reason_json(delta.finish)}};
  if (delta.finish != engine::FinishReason::None) choice["stop_reason"] = stop_reason_json(delta);
  out["choices"] = json::array{std::move(choice)};
  return out;
}

json::object usage_chunk(const ResponseMeta& meta, Api api, const engine::Usage& usage) {
  json::object out = envelope(meta, api == Api::Chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array{};
  out["usage"] = usage_json(usage);
  return out;
}

std::string sse_event(const json::value& v) { return "data: " + json::serialize(v) + "\n\n"; }

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    uint32_t cp = c & (0x7F >> len);
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are invalid too.
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= kMin[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

}  // namespace inferd::daemon::openai
