#include "engine/deepseek_v4_template.hpp"

namespace inferd::engine {

// Variables: messages (system, user, assistant with reasoning_content and
// tool_calls, tool), tools, add_generation_prompt, thinking or enable_thinking
// (on unless one is given and neither is true, as vLLM serves V4),
// reasoning_effort (none, low, minimal, medium, high, max; default high when
// thinking), drop_thinking (default true).
//
// The layout, as the reference encoding writes it: BOS; in thinking mode the
// reasoning-effort preamble; request tools in the first system message (one
// with no text is made first if there is none); runs of user and tool
// messages as one <｜User｜> turn, parts joined by blank lines, results as
// <tool_result>...</tool_result>; an assistant turn's reasoning and </think>
// only in thinking mode and only after the last user turn (every turn when
// the request has tools or drop_thinking is false); its calls as a DSML
// tool_calls block; EOS after each assistant turn; <｜Assistant｜> with <think>
// (thinking, last user turn) or </think> after each user turn that an
// assistant turn follows.
//
// Where it differs from the reference: the final <｜Assistant｜> opener is
// written only with add_generation_prompt (the reference always writes it);
// tool results stay in message order (the reference sorts them by call id,
// which ChatMessage does not carry); roles beyond system, user, assistant and
// tool (developer, latest_reminder), per-message tasks, response_format and
// image parts are not expressible through ChatMessage, so not handled.
std::string_view deepseek_v4_chat_template() {
  return R"jinja(
{%- set dsml = '｜DSML｜' -%}
{%- if thinking is defined or enable_thinking is defined -%}
  {%- set think = (thinking is defined and thinking) or (enable_thinking is defined and enable_thinking) -%}
{%- else -%}
  {%- set think = true -%}
{%- endif -%}
{%- set effort = 'high' if think else 'low' -%}
{%- if reasoning_effort is defined and reasoning_effort is string -%}
  {%- if reasoning_effort == 'none' -%}
    {%- set think = false -%}
  {%- elif reasoning_effort == 'max' -%}
    {%- set effort = 'max' -%}
  {%- elif reasoning_effort in ['low', 'minimal', 'medium'] -%}
    {%- set effort = 'low' -%}
  {%- else -%}
    {%- set effort = 'high' -%}
  {%- endif -%}
{%- endif -%}
{%- set has_tools = tools is defined and tools is not none and tools | length > 0 -%}
{#- Earlier turns keep their reasoning when the request has tools. -#}
{%- set keep_reasoning = has_tools or (drop_thinking is defined and not drop_thinking) -%}
{%- set ns = namespace(last_user=-1, system=-1) -%}
{%- for m in messages -%}
  {%- if m.role == 'user' or m.role == 'tool' -%}
    {%- set ns.last_user = loop.index0 -%}
  {%- endif -%}
  {%- if m.role == 'system' and ns.system < 0 -%}
    {%- set ns.system = loop.index0 -%}
  {%- endif -%}
{%- endfor -%}
{%- macro tools_section(tools) -%}
  {{- '## Tools\n\nYou have access to a set of tools to help answer the user\'s question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:\n\n' -}}
  {{- '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="$TOOL_NAME">\n<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke name="$TOOL_NAME2">\n...\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\n' -}}
  {{- 'String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.\n\n' -}}
  {{- 'If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n' -}}
  {{- 'Otherwise, output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n' -}}
  {%- for t in tools -%}
    {%- if not loop.first -%}{{- '\n' -}}{%- endif -%}
    {{- (t.function if t.function is defined else t) | tojson -}}
  {%- endfor -%}
  {{- '\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n' -}}
{%- endmacro -%}
{%- macro opener(open_thinking) -%}
  {{- '<｜Assistant｜>' + ('<think>' if open_thinking else '</think>') -}}
{%- endmacro -%}
{{- '<｜begin▁of▁sentence｜>' -}}
{%- if think and effort == 'high' -%}
  {{- 'Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\nExplicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n' -}}
{%- elif think and effort == 'max' -%}
  {{- 'Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\nYou MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any surface symptom.\nDo not stop reasoning until you have independently verified the solution from multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n' -}}
{%- endif -%}
{%- if has_tools and ns.system < 0 -%}
  {#- The system message the tools need, made before the first message. -#}
  {{- '\n\n' + tools_section(tools) -}}
  {%- if (messages | length > 0 and messages[0].role == 'assistant') or (messages | length == 0 and add_generation_prompt) -%}
    {{- opener(think) -}}
  {%- endif -%}
{%- endif -%}
{%- for m in messages -%}
  {%- set prev_role = messages[loop.index0 - 1].role if loop.index0 > 0 else '' -%}
  {%- set next_role = messages[loop.index0 + 1].role if not loop.last else '' -%}
  {%- if m.role == 'system' -%}
    {{- m.content -}}
    {%- if has_tools and loop.index0 == ns.system -%}
      {{- '\n\n' + tools_section(tools) -}}
    {%- endif -%}
    {%- if next_role == 'assistant' or (loop.last and add_generation_prompt) -%}
      {{- opener(think and (keep_reasoning or loop.index0 > ns.last_user)) -}}
    {%- endif -%}
  {%- elif m.role == 'user' or m.role == 'tool' -%}
    {%- if prev_role == 'user' or prev_role == 'tool' -%}
      {{- '\n\n' -}}
    {%- else -%}
      {{- '<｜User｜>' -}}
    {%- endif -%}
    {%- if m.role == 'tool' -%}
      {{- '<tool_result>' + m.content + '</tool_result>' -}}
    {%- else -%}
      {{- m.content -}}
    {%- endif -%}
    {%- if next_role == 'assistant' or (loop.last and add_generation_prompt) -%}
      {{- opener(think and (keep_reasoning or loop.index0 == ns.last_user)) -}}
    {%- endif -%}
  {%- elif m.role == 'assistant' -%}
    {%- if think and (keep_reasoning or loop.index0 > ns.last_user) -%}
      {%- if m.reasoning_content is defined and m.reasoning_content is not none -%}
        {{- m.reasoning_content -}}
      {%- elif m.reasoning is defined and m.reasoning is not none -%}
        {{- m.reasoning -}}
      {%- endif -%}
      {{- '</think>' -}}
    {%- endif -%}
    {%- if m.content is not none -%}
      {{- m.content -}}
    {%- endif -%}
    {%- if m.tool_calls is defined and m.tool_calls -%}
      {{- '\n\n<' + dsml + 'tool_calls>\n' -}}
      {%- for tc in m.tool_calls -%}
        {%- set f = tc.function if tc.function is defined else tc -%}
        {%- if f.arguments is not mapping -%}
          {{- raise_exception('tool call arguments must be a JSON object') -}}
        {%- endif -%}
        {%- if not loop.first -%}{{- '\n' -}}{%- endif -%}
        {{- '<' + dsml + 'invoke name="' + f.name + '">\n' -}}
        {%- for k, v in f.arguments.items() -%}
          {%- if not loop.first -%}{{- '\n' -}}{%- endif -%}
          {{- '<' + dsml + 'parameter name="' + k + '" string="' + ('true' if v is string else 'false') + '">' -}}
          {{- v if v is string else v | tojson -}}
          {{- '</' + dsml + 'parameter>' -}}
        {%- endfor -%}
        {{- '\n</' + dsml + 'invoke>' -}}
      {%- endfor -%}
      {{- '\n</' + dsml + 'tool_calls>' -}}
    {%- endif -%}
    {{- '<｜end▁of▁sentence｜>' -}}
  {%- endif -%}
{%- endfor -%}
)jinja";
}

}  // namespace inferd::engine
