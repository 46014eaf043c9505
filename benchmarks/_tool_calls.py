"""A tool-calling workload: one long system prompt (four tools as JSON schemas, in the form
Qwen2.5's chat template gives them) that every request sends, and twelve user requests,
most of them answered with a tool call that quotes a few tokens of the schemas and then
leaves them. Text every prompt holds and no answer copies: what the memory of earlier
requests must not take for text a model reproduces (RequestMemory.agreeing_run).
"""

from __future__ import annotations

import json

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather for a city, in metric or imperial units.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city name, e.g. Paris"},
                    "unit": {
                        "type": "string",
                        "enum": ["metric", "imperial"],
                        "description": "The unit system to report in",
                    },
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web and return the titles and links of the top results.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "The search query"},
                    "max_results": {
                        "type": "integer",
                        "description": "How many results to return, at most 10",
                    },
                },
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "create_event",
            "description": "Create a calendar event for the user.",
            "parameters": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "description": "The event title"},
                    "start": {
                        "type": "string",
                        "description": "Start time in ISO 8601 format, e.g. 2025-03-01T14:00",
                    },
                    "duration_minutes": {
                        "type": "integer",
                        "description": "Length of the event in minutes",
                    },
                    "attendees": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Email addresses of the people invited",
                    },
                },
                "required": ["title", "start"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_python",
            "description": "Run a short Python snippet in a sandbox and return its standard "
            "output.",
            "parameters": {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The Python source code to run"}
                },
                "required": ["code"],
            },
        },
    },
]
# Qwen2.5's own wording for tools (its chat template), written out so every model sees it.
SYSTEM = (
    "You are a helpful assistant with access to tools. When a tool helps, answer with a tool "
    "call and nothing else.\n\n# Tools\n\nYou may call one or more functions to assist with "
    "the user query.\n\nYou are provided with function signatures within <tools></tools> XML "
    "tags:\n<tools>\n"
    + "\n".join(json.dumps(x) for x in TOOLS)
    + "\n</tools>\n\nFor each function call, return a json object with function name and "
    'arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": '
    '<function-name>, "arguments": <args-json-object>}\n</tool_call>'
)
ASKS = [
    "What's the weather like in Lisbon right now?",
    "Find me three articles about the history of the printing press.",
    "Put a meeting called Budget review on my calendar for 2025-04-02 at 10:00, one hour, "
    "with ana@example.com.",
    "What is 2 to the power of 100? Compute it exactly.",
    "Is it raining in Tokyo? Give me the temperature in Fahrenheit.",
    "Explain in two sentences what a hash map is.",
    "Search for the latest stable release of PostgreSQL.",
    "Schedule lunch with bob@example.com tomorrow, 2025-04-03 at 12:30, for 45 minutes.",
    "Write and run Python that prints the first 10 Fibonacci numbers.",
    "What's the weather in Nairobi in metric units?",
    "Which tools do you have? Describe each briefly.",
    "Look up the population of Canada and tell me the source.",
]


def requests() -> list:
    """[(id, chat messages)]: the system prompt and one user request each."""
    return [
        (f"tools-{i}", [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask}])
        for i, ask in enumerate(ASKS)
    ]
