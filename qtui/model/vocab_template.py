"""The chat template written into synthetic GGUF files: Qwen3.5's ChatML shape, written for qtui.

Roles render as `<|im_start|>{role}\\n{content}<|im_end|>\\n`. A leading system message (and the tool
list, when `tools` is given) opens the prompt; `tool` messages are folded into a user turn as
`<tool_response>` blocks; assistant turns after the last user query keep their `reasoning_content` as a
`<think>` block, earlier ones drop it. The generation prompt is `<|im_start|>assistant\\n` followed by an
empty `<think>\\n\\n</think>\\n\\n` block (non-thinking, the default), or by `<think>\\n` when the caller
passes `enable_thinking=True`. Content may be a string or a list of `{"type": "text", "text": ...}` parts.
"""

from __future__ import annotations

CHAT_TEMPLATE = r"""
{%- macro render_content(content) -%}
    {%- if content is none -%}
    {%- elif content is string -%}
        {{- content -}}
    {%- else -%}
        {%- for part in content -%}
            {%- if part.type == 'text' -%}
                {{- part.text -}}
            {%- else -%}
                {{- raise_exception('only text content parts are supported, got type ' ~ part.type) -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if not messages -%}
    {{- raise_exception('messages must not be empty') -}}
{%- endif -%}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- render_content(messages[0].content) + '\n\n' }}
    {%- endif %}
    {{- '# Tools\n\nYou may call one or more functions. Their signatures are within <tools></tools> tags:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' + (tool | tojson) }}
    {%- endfor %}
    {{- '\n</tools>\n\nFor each call, return a JSON object with "name" and "arguments" within ' }}
    {{- '<tool_call></tool_call> tags.<|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + render_content(messages[0].content) + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- if message.role == 'user' %}
        {%- set ns.last_query_index = (messages|length - 1) - loop.index0 %}
        {%- break %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = render_content(message.content) %}
    {%- if message.role not in ['system', 'user', 'assistant', 'tool'] %}
        {{- raise_exception('unknown role: ' ~ message.role) }}
    {%- elif message.role == 'system' %}
        {%- if not loop.first %}
            {{- raise_exception('a system message may only come first') }}
        {%- endif %}
    {%- elif message.role == 'user' %}
        {{- '<|im_start|>user\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' %}
        {%- if '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {{- '<|im_start|>assistant\n' }}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' }}
        {%- endif %}
        {{- content }}
        {%- for call in message.tool_calls or [] %}
            {%- set fn = call.function if call.function is defined else call %}
            {{- '\n' if (content or not loop.first) else '' }}
            {{- '<tool_call>\n{"name": "' + fn.name + '", "arguments": ' }}
            {{- (fn.arguments if fn.arguments is string else (fn.arguments | tojson)) + '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- else %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking %}
        {{- '<think>\n' }}
    {%- else %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
""".strip()
